#!/bin/bash
# After `bash ../shared/gpu/build_wheels.sh` (run from the project root): add to .whl/ what the
# daemon and SGLang's HTTP server need beyond the probe's set (the device image lacks them):
#   the daemon: apscheduler (+tzlocal), sqlite-utils (+sqlite-fts4, click-default-group)
#   sglang.launch_server: jsonschema (+jsonschema-specifications, referencing, rpds-py)
#   the GPU-marked tests (`python3 -m pytest -m gpu tests/...`): pytest (+pluggy, iniconfig)
# Together ~1.2 MB; .whl then holds ~63 MB of the 64 MiB that travel with one command.
set -euo pipefail
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl \
  apscheduler==3.11.3 tzlocal==5.4.5 sqlite-utils==4.2.1 sqlite-fts4==1.0.3 click-default-group==1.2.4 \
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
  pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1
# build_wheels.sh's `sglang-0.5.17-*.whl` glob takes a second download (a cp311 wheel in its DL dir, e.g. from a
# CPU venv's `pip download`) as its output: the engine's wheel then silently misses (12-05's first call)
ls .whl/sglang-0.5.17-cp312-*.whl >/dev/null 2>&1 || { echo "extra_wheels: .whl has no sglang-0.5.17 cp312 wheel;" \
  "remove other sglang-0.5.17-*.whl from build_wheels.sh's download dir (/tmp/sgl/dl) and build again" >&2; exit 1; }
echo "$(ls .whl | wc -l) wheels, $(du -cb .whl/*.whl | tail -1 | cut -f1) bytes"
