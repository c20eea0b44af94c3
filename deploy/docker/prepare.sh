#!/bin/sh
# Make an environment's data at image build time, into $ENVHUB_CACHE, so that servers start
# without writing (read-only root file system) and without network.
set -eu
case "$1" in
    scienceworld)  # the simulator and its tasks ship in the scienceworld wheel
        ;;
    alfworld)  # the generated task set: ALFWORLD_GAMES per split (0 = whole splits)
        python -m envhub.envs.alfworld.generator --count "${ALFWORLD_GAMES:-0}" --workers "$(nproc)" \
            --cache-dir "$ENVHUB_CACHE/alfworld"
        ;;
    *)  # kinds that build their data (catalogue, corpus, BM25 index) on first use: use them once
        python -c "import sys; from envhub.core.registry import kind_class; kind_class(sys.argv[1])()" "$1"
        ;;
esac
