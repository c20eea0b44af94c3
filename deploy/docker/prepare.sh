#!/bin/sh
# Make an environment's data at image build time, into $ENVHUB_CACHE, so that servers start
# without writing (read-only root file system) and without network: `envhub prepare` (every core; nothing
# else runs in a build, so at full priority).
set -eu
case "$1" in
    scienceworld)  # the simulator and its tasks ship in the scienceworld wheel: nothing to make
        ;;
    alfworld)  # the generated task set: ALFWORLD_GAMES per split (0 = whole splits)
        envhub prepare --env alfworld --tasks "${ALFWORLD_GAMES:-0}" --workers "$(nproc)" --niceness 0
        ;;
    *)  # WebShop's catalogue and BM25 index, Search-QA's corpus, questions and index
        envhub prepare --env "$1" --niceness 0
        ;;
esac
