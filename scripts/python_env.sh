# Sourced by the scripts (setup, build, test, sanitize, demo, fuzz): the project's Python is the
# virtual environment scripts/setup.sh makes in .venv/ (CUBE3D_VENV to put it elsewhere), so
# that nothing is pip-installed into the system's Python. PYTHON, when set, wins (a Python
# that already has torch==2.11.0 and the test tools); before setup has run, python3.
CUBE3D_VENV=${CUBE3D_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$CUBE3D_VENV/bin/python" ]; then
    PYTHON=$CUBE3D_VENV/bin/python
  else
    PYTHON=python3
  fi
fi
export PYTHON
