# Run a Gradescope autograder bundle the way Gradescope does, inside a fresh container (nox -s gradescope-test).
# Mounted: /bundle/autograder.zip and /bundle/submission (a student's course folder); the results are
# copied back to /bundle/results. Packages come from the environment's pip settings (a wheelhouse).
set -euo pipefail
mkdir -p /autograder/source /autograder/results
cd /autograder/source
python3 -m zipfile -e /bundle/autograder.zip .
chmod +x setup.sh run_autograder
echo "== setup.sh"
time bash ./setup.sh > /bundle/setup.log 2>&1 || { tail -40 /bundle/setup.log; exit 1; }
cp -r /bundle/submission /autograder/submission
echo "== run_autograder"
time /autograder/source/run_autograder
cp -r /autograder/results /bundle/results
python3 - <<'PY'
import json
results = json.load(open("/autograder/results/results.json"))
extra = results.get("extra_data", {})
print(f"results.json: score {results['score']} of {extra.get('max_score')} ({extra.get('pending')} pending GPU), "
      f"{len(results['tests'])} tests")
assert results["tests"], "no tests in results.json"
assert results["score"] + extra["pending"] == extra["max_score"], "the reference must earn every CPU point"
PY
