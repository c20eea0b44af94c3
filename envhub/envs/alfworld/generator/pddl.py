"""A scene and a task written as an ALFWorld PDDL problem (the `pddl_problem` of a game file)."""

from __future__ import annotations

import alfworld.gen.constants as constants
import alfworld.gen.goal_library as goal_library

from envhub.envs.alfworld.generator.naming import location_id, mangle
from envhub.envs.alfworld.generator.scene import Scene
from envhub.envs.alfworld.generator.tasks import TaskParams, can_contain


def goal_pddl(task: TaskParams) -> str:
    """ALFWorld's goal for the task (`alfworld.gen.goal_library`), closing the problem's `define`."""
    template = goal_library.gdict[task.task_type]["pddl"]
    filled = template.format(obj=task.object_target, recep=task.parent_target, toggle=task.toggle_target, mrecep="")
    return mangle(filled)


def _properties(otype: str) -> list[str]:
    names = ["pickupable"]
    for action, predicate in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable")):
        if otype in constants.VAL_ACTION_OBJECTS[action]:
            names.append(predicate)
    if otype in constants.VAL_ACTION_OBJECTS["Sliceable"]:
        names.append("sliceable")
    if otype in constants.MOVABLE_RECEPTACLES_SET:
        names.append("isReceptacleObject")
    return names


def problem_pddl(scene: Scene, task: TaskParams, name: str) -> str:
    """The full PDDL problem text; facts are sorted so equal scenes give equal text."""
    agent_loc = location_id(scene.start)
    locations = sorted({location_id(r.pose) for r in scene.receptacles} | {agent_loc})
    receptacles = {mangle(r.thor_id): r for r in scene.receptacles}
    placed = {mangle(o.thor_id): o for o in scene.objects + scene.lamps}
    otypes = sorted({o.otype for o in placed.values()})
    rtypes = sorted({r.rtype for r in receptacles.values()})

    declarations = ["agent1 - agent"]
    declarations += [f"{loc} - location" for loc in locations]
    declarations += [f"{rid} - receptacle" for rid in sorted(receptacles)]
    declarations += [f"{oid} - object" for oid in sorted(placed)]
    declarations += [f"{t}Type - otype" for t in otypes]
    declarations += [f"{t}Type - rtype" for t in rtypes]

    facts = [f"(atLocation agent1 {agent_loc})"]
    for rid, r in sorted(receptacles.items()):
        facts.append(f"(receptacleAtLocation {rid} {location_id(r.pose)})")
        facts.append(f"(receptacleType {rid} {r.rtype}Type)")
        if r.openable:
            facts.append(f"(openable {rid})")
    for oid, o in sorted(placed.items()):
        facts.append(f"(objectType {oid} {o.otype}Type)")
        facts.append(f"(inReceptacle {oid} {mangle(o.receptacle.thor_id)})")
        facts.append(f"(objectAtLocation {oid} {location_id(o.receptacle.pose)})")
        if o.otype == task.toggle_target:
            facts.append(f"(toggleable {oid})")
        else:
            facts += [f"({p} {oid})" for p in _properties(o.otype)]
    facts += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if can_contain(r, o)]

    lines = [f"(define (problem {name})", "(:domain alfred)", "(:objects"]
    lines += [f"    {d}" for d in declarations]
    lines += [")", "(:init"]
    lines += [f"    {f}" for f in facts]
    lines += [")", goal_pddl(task)]
    return "\n".join(lines) + "\n"
