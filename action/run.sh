#!/usr/bin/env bash
# The shell of action.yml (a composite action). Every input arrives in an environment variable set by
# the action's `env:` and is used only as a quoted argument: nothing here evaluates it.
#
#   INPUT_TRACE         the head's trace (anything `traceanalyzer report` takes)           required
#   INPUT_BASE          the base's saved JSON report; empty or missing: no baseline yet
#   INPUT_FAIL_ON       gates, separated by spaces, commas or new lines (step_time:+5% ...)
#   INPUT_FAIL_ON_UNCONFIRMED  true: step_time gates also fail on likely_slower (within run-to-run variation)
#   INPUT_RUN_NOISE     diff --run-noise (one base report: the run-to-run allowance); empty: the default
#   INPUT_COMMENT_FILE  where the Markdown comment goes   (default $RUNNER_TEMP/traceanalyzer-comment.md)
#   INPUT_SUMMARY       true: the comment is also appended to $GITHUB_STEP_SUMMARY
#   INPUT_SERVER        a `traceanalyzer serve` service: upload the trace there and compare with the last
#                       runs of INPUT_BASE_BRANCH (default main) instead of INPUT_BASE
#   INPUT_PROJECT, INPUT_TOKEN  the service's project and its token (with INPUT_SERVER)
#   INPUT_OIDC_AUDIENCE  with INPUT_SERVER and no token: the job's OIDC token (this audience) is exchanged
#                       for a short-lived token of the project (no stored secret)
#   INPUT_BRANCH, INPUT_COMMIT  this run's branch and commit (default: GITHUB_HEAD_REF or GITHUB_REF_NAME;
#                       GITHUB_SHA)
#   INPUT_PYTHON        the interpreter the tool is installed with (default python3)
#   TRACEANALYZER_SKIP_INSTALL=1  use $TRACEANALYZER_PYTHON (default: INPUT_PYTHON), already holding the tool
#
# Outputs: verdict, change, report-json, comment, gate (and run-url with a server). Exit 0; 1 a gate failed (comment and outputs
# written first); 2 bad input or usage, 3 the tool's internal error (a comment that says it failed,
# never a gate).
set -Eeuo pipefail
# A failure of this script itself is exit 3 (an internal error), never 1 (which means a gate failed).
trap 'echo "::error title=traceanalyzer::action/run.sh failed at line $LINENO" >&2; exit 3' ERR

MARKER='<!-- traceanalyzer-diff -->'
work="${RUNNER_TEMP:?RUNNER_TEMP is not set}/traceanalyzer"
mkdir -p "$work"
comment="${INPUT_COMMENT_FILE:-}"
[ -n "$comment" ] || comment="$RUNNER_TEMP/traceanalyzer-comment.md"
mkdir -p -- "$(dirname -- "$comment")"
head_json="$work/report.json"

output() {  # name value: a multi-line-safe entry of $GITHUB_OUTPUT
  local delim="ghadelim_$RANDOM$RANDOM$RANDOM"
  printf '%s<<%s\n%s\n%s\n' "$1" "$delim" "$2" "$delim" >> "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
}

annotate() {  # level message: one workflow-command line, with GitHub's escapes
  local msg="${2//'%'/'%25'}"
  msg="${msg//$'\r'/'%0D'}"
  msg="${msg//$'\n'/'%0A'}"
  printf '::%s title=traceanalyzer::%s\n' "$1" "$msg"
}

publish() {  # the comment file is complete: the outputs that name it, and the job summary
  output comment "$comment"
  if [ "${INPUT_SUMMARY:-true}" = true ] && [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat "$comment" >> "$GITHUB_STEP_SUMMARY"
  fi
}

stop_token="traceanalyzer-$RANDOM$RANDOM$RANDOM"
tool() {  # the tool, its output never read as workflow commands (names in a trace are not ours)
  echo "::stop-commands::$stop_token"
  local code=0
  "$PY" -m traceanalyzer "$@" 2> "$work/stderr" || code=$?
  cat "$work/stderr" >&2
  echo "::$stop_token::"
  return "$code"
}

failed() {  # code: the tool failed (bad input, usage, a bug): say so loudly, no gate wording
  local code="$1" line
  line=$(grep -a 'traceanalyzer: error:' "$work/stderr" | tail -n 1 || true)
  [ -n "$line" ] || line="traceanalyzer: error: exit status $code ($(tail -n 1 "$work/stderr" 2>/dev/null || true))"
  line="${line:0:1000}"
  annotate error "$line"
  {
    printf '%s\n## ⚠️ traceanalyzer could not analyse this run\n\n' "$MARKER"
    printf 'Exit status %s (%s):\n\n```text\n%s\n```\n' "$code" \
      "$([ "$code" = 2 ] && echo 'bad input or usage' || echo 'internal error')" "${line//\`/\'}"
  } > "$comment"
  output change error
  output gate none
  publish
  exit "$code"
}

# --- the tool ------------------------------------------------------------------------------------
if [ "${TRACEANALYZER_SKIP_INSTALL:-}" = 1 ]; then
  PY="${TRACEANALYZER_PYTHON:-${INPUT_PYTHON:-python3}}"
else
  # A venv of its own (works where the system Python refuses pip installs); the tool from this
  # action's own checkout, so the version is the action's tag and no index holds the tool.
  "${INPUT_PYTHON:-python3}" -m venv --system-site-packages "$work/venv"
  "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${GITHUB_ACTION_PATH:?}"
  PY="$work/venv/bin/python"
fi

[ -n "${INPUT_TRACE:-}" ] || { : > "$work/stderr"; echo "traceanalyzer: error: the action's trace input is empty" > "$work/stderr"; failed 2; }

gates=()
while IFS= read -r line || [ -n "$line" ]; do
  read -r -a words <<< "${line//,/ }"
  for rule in "${words[@]}"; do gates+=(--fail-on "$rule"); done
done <<< "${INPUT_FAIL_ON:-}"
unconfirmed=()
if [ "${INPUT_FAIL_ON_UNCONFIRMED:-false}" = true ] && [ "${#gates[@]}" -gt 0 ]; then unconfirmed=(--fail-on-unconfirmed); fi
noise=()
if [ -n "${INPUT_RUN_NOISE:-}" ]; then noise=(--run-noise "$INPUT_RUN_NOISE"); fi

# --- the head's report: the verdict, and the JSON report the next pull request compares with --------
code=0
tool report "$INPUT_TRACE" -o "$head_json" --format json --force -q || code=$?
[ "$code" = 0 ] || failed "$code"
output report-json "$head_json"
verdict=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["diagnosis"]["primary"] or "undetermined")' "$head_json")
output verdict "$verdict"

# --- with a service: upload, compare there with the base branch's last runs -------------------------
if [ -n "${INPUT_SERVER:-}" ]; then
  if [ -z "${INPUT_PROJECT:-}" ]; then
    echo "traceanalyzer: error: the action's server input needs the project input too" > "$work/stderr"
    failed 2
  fi
  code=0
  oidc=()
  if [ -z "${INPUT_TOKEN:-${TRACEANALYZER_TOKEN:-}}" ] && [ -n "${INPUT_OIDC_AUDIENCE:-}" ]; then
    oidc=(--oidc-audience "$INPUT_OIDC_AUDIENCE")
  fi
  TRACEANALYZER_TOKEN="${INPUT_TOKEN:-${TRACEANALYZER_TOKEN:-}}" tool upload "$INPUT_TRACE" \
    --server "$INPUT_SERVER" --project "$INPUT_PROJECT" "${oidc[@]}" \
    --branch "${INPUT_BRANCH:-${GITHUB_HEAD_REF:-${GITHUB_REF_NAME:-}}}" --commit "${INPUT_COMMIT:-${GITHUB_SHA:-}}" \
    --base-branch "${INPUT_BASE_BRANCH:-main}" --comment "$comment" --json "$work/upload.json" -q "${gates[@]}" "${unconfirmed[@]}" \
    || code=$?
  [ "$code" -le 1 ] || failed "$code"
  read -r change gate url < <("$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
gates = r.get("gates") or []
print(r.get("change_verdict") or "no-baseline", "none" if not gates else "passed" if all(g["passed"] for g in gates)
      else "failed", (r.get("links") or {}).get("run") or "-")
' "$work/upload.json")
  output change "$change"
  output gate "$gate"
  output run-url "$url"
  publish
  if [ "$code" = 1 ]; then
    annotate error "gate failed: see the comment ($comment)"
    exit 1
  fi
  exit 0
fi

# --- no baseline: say so, pass ---------------------------------------------------------------------
if [ -z "${INPUT_BASE:-}" ] || [ ! -f "$INPUT_BASE" ]; then
  "$PY" - "$head_json" "${INPUT_BASE:-}" "${#gates[@]}" > "$comment" <<'PY'
import json, sys
from traceanalyzer import inert
report, base, ngates = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
d = report["diagnosis"]
print("<!-- traceanalyzer-diff -->")
print("## ⚪ traceanalyzer: no baseline yet\n")
where = f" ({inert.markdown_code(base)} not found)" if base else ""
print(f"No stored report of the base branch{where}: nothing to compare with yet"
      + ("; the gates were not evaluated." if ngates else "."))
print(f"\nHEAD's verdict: **{inert.markdown(d['primary'] or 'undetermined', 60)}**"
      + (f": {inert.markdown(d['headline'], 600)}" if d.get("headline") else ""))
PY
  annotate notice "no baseline: nothing to compare with (HEAD's verdict: $verdict)"
  output change no-baseline
  output gate none
  publish
  exit 0
fi

# --- the change against the base, with the gates -----------------------------------------------------
code=0
tool diff "$INPUT_BASE" "$head_json" -o "$work/diff.json" --format json --force -q "${gates[@]}" "${unconfirmed[@]}" "${noise[@]}" || code=$?
[ "$code" -le 1 ] || failed "$code"
code=0
tool diff "$INPUT_BASE" "$head_json" -o "$comment" --format md --force -q "${gates[@]}" "${unconfirmed[@]}" "${noise[@]}" || code=$?
[ "$code" -le 1 ] || failed "$code"
read -r change gate < <("$PY" -c '
import json, sys
c = json.load(open(sys.argv[1]))
gates = c.get("gates") or []
print(c["change_verdict"], "none" if not gates else "passed" if all(g["passed"] for g in gates) else "failed")
' "$work/diff.json")
output change "$change"
output gate "$gate"
publish
if [ "$code" = 1 ]; then
  annotate error "gate failed: see the comment ($comment)"
  exit 1
fi
