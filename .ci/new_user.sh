#!/usr/bin/env bash
# A new user's first hour, as CI runs it: a fresh virtualenv, the wheel CI built (under its
# distribution name), the docs tutorial run start to finish, the user's code type-checked
# with mypy --strict and pyright strict, and the CLI scripted with --json.
# Usage: .ci/new_user.sh path/to/prana_workflows-*.whl
set -euo pipefail
wheel="$(realpath "$1")"
root="$(cd "$(dirname "$0")/.." && pwd)"
home="$(mktemp -d)"
cd "$home"

python3 -m venv venv
. venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "${wheel}[cli]" mypy 'pyright[nodejs]'
echo "installed: $(prana --version)"
python -m prana --version >/dev/null

# The tutorial's code, page by page, as the reader copies it into files.
python - "$root/docs/tutorial" <<'PY'
import pathlib, re, sys
pages = ["first-workflow", "first-retry", "runner", "restart"]
for name in pages:
    text = (pathlib.Path(sys.argv[1]) / f"{name}.md").read_text()
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M)
    pathlib.Path(f"{name.replace('-', '_')}.py").write_text("\n\n".join(blocks))
PY
for page in first_workflow first_retry runner restart; do
    echo "== tutorial: $page"
    python "$page.py"
done

echo "== the user's code type-checks"
mypy --strict first_workflow.py first_retry.py runner.py restart.py
echo '{"typeCheckingMode": "strict", "pythonVersion": "3.10"}' > pyrightconfig.json
pyright first_workflow.py first_retry.py runner.py restart.py

echo "== the CLI, scripted with --json"
cat > actions.py <<'PY'
def fetch(params, ctx):
    if ctx.attempt < 2:
        raise ConnectionError("down")
    return {"city": params["city"]}

def register(registry):
    registry.register("weather.fetch", fetch)
PY
cat > weather.json <<'JSON'
{"id": "weather", "nodes": [
  {"key": "start", "type": "manual.trigger"},
  {"key": "fetch", "type": "weather.fetch", "params": {"city": "{{ $input.main.city }}"},
   "settings": {"retry_on_failed": true, "max_retries": 2, "retry_delay_ms": 10}}],
 "connections": [{"from_node": "start", "to_node": "fetch"}]}
JSON
prana run weather.json --actions actions.py --input '{"city": "Lisbon"}' --db cli.db >/dev/null
id="$(prana list --db cli.db --json | python -c 'import json,sys; print(json.load(sys.stdin)["executions"][0]["id"])')"
status="$(prana show "${id:0:12}" --db cli.db --json | python -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], len(d["node_executions"]["fetch"][0]["attempts"]))')"
echo "execution ${id:0:12}: $status"
[ "$status" = "completed 2" ]
set +e
prana deliver "$id" --data '{}' --actions actions.py --db cli.db 2>/dev/null
code=$?
set -e
echo "deliver to a completed execution exits $code (refused)"
[ "$code" = 3 ]
echo "new user: ok"
