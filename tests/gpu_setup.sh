# Source this on a GPU machine whose Python lacks the project's small dependencies: installs
# the wheels of .whl/ (../shared/tools/device-wheels.sh) into /tmp/site and puts them, the
# repository and their scripts (ninja, for load_inline builds) on the paths.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1 COLUMNS=160
