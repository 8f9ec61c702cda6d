"""The tools' table and the part of the Model Context Protocol the service speaks itself.

* `ToolSpec`: a tool's name, description, parameters (their JSON Schema is made from them) and whether
  it only reads; `check` validates a call's arguments against them (one line per mistake).
* `call`: a tool's call -> (the answer's JSON text, is_error): every failure is one line for the agent
  (a bad argument, a path outside the allowed folders, a missing file, a file that is not a trace), never
  a traceback.
* `handle`: one JSON-RPC message of MCP's streamable HTTP transport, stateless (no session, answers as
  application/json): `initialize`, `ping`, `tools/list`, `tools/call`; notifications and responses are
  accepted with nothing to answer. The stdio server uses the official SDK instead (`mcp_server`); both
  list the same table and call the same functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._version import __version__
from ..errors import TraceAnalyzerError
from .answers import DEFAULT_LIMIT, DEFAULT_TOP, MAX_LIMIT, MAX_TOP, MIN_LIMIT, AnswerError, line

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
SERVER_NAME = "traceanalyzer"
INSTRUCTIONS = ("Why is this training or inference run slow? Start with `analyze` (the verdict, the time lost and "
                "what removing each cause would save); `explain` gives one finding's evidence; `steps`, `gaps`, "
                "`kernels` and `operators` give top-N tables; `compare` says whether a change made a run slower "
                "and which part moved; `define` gives a figure's definition. Answers are small (about 2 KB: pass "
                "`limit` for more) and say where the rest is (`more`).")
# JSON-RPC error codes
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
FORBIDDEN = -32001  # a tool the caller's token may not call (implementation-defined server error)


class ToolInputError(ValueError):
    """A call's arguments do not fit the tool (one line)."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # "string" | "integer" | "number" | "boolean"
    description: str
    required: bool = False
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    enum: tuple[str, ...] = ()

    def schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.default is not None:
            s["default"] = self.default
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        if self.enum:
            s["enum"] = list(self.enum)
        return s

    def check(self, tool: str, value: Any) -> Any:
        kinds: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                              "boolean": (bool,)}
        if isinstance(value, bool) and self.type != "boolean" or not isinstance(value, kinds[self.type]):
            raise ToolInputError(f"{tool}: {self.name} must be {'an' if self.type == 'integer' else 'a'} {self.type}")
        if isinstance(value, str) and (len(value) > 4096 or "\x00" in value):
            raise ToolInputError(f"{tool}: {self.name} is too long or holds a NUL character")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                self.minimum is not None and value < self.minimum or self.maximum is not None and value > self.maximum):
            raise ToolInputError(f"{tool}: {self.name} must be {self.minimum:g} to {self.maximum:g}")
        if self.enum and value not in self.enum:
            raise ToolInputError(f"{tool}: {self.name} must be one of {', '.join(self.enum)}")
        return value


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...]
    read_only: bool = True  # a read-only token may call it

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {p.name: p.schema() for p in self.params},
                "required": [p.name for p in self.params if p.required], "additionalProperties": False}

    def listing(self) -> dict[str, Any]:
        """The tool as `tools/list` gives it."""
        return {"name": self.name, "description": self.description, "inputSchema": self.schema(),
                "annotations": {"readOnlyHint": self.read_only, "destructiveHint": not self.read_only,
                                "idempotentHint": self.read_only, "openWorldHint": False}}

    def check(self, arguments: Any) -> dict[str, Any]:
        """The arguments, validated, with the defaults filled in."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ToolInputError(f"{self.name}: the arguments must be an object")
        known = {p.name: p for p in self.params}
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise ToolInputError(f"{self.name}: unknown argument {line(unknown[0], 40)!r} "
                                 f"(takes {', '.join(known) or 'none'})")
        out = {}
        for p in self.params:
            if arguments.get(p.name) is None:
                if p.required:
                    raise ToolInputError(f"{self.name}: {p.name} is required")
                out[p.name] = p.default
            else:
                out[p.name] = p.check(self.name, arguments[p.name])
        return out


# --- the parameters the tools share -------------------------------------------------------------------
LIMIT = Param("limit", "integer", "Most bytes of the answer (its JSON text); rows past it are cut and counted.",
              default=DEFAULT_LIMIT, minimum=MIN_LIMIT, maximum=MAX_LIMIT)
TOP = Param("top", "integer", "Rows to return.", default=DEFAULT_TOP, minimum=1, maximum=MAX_TOP)
RANK = Param("rank", "string", "Only this rank (its number, or its file name when the trace names none).")
DEVICE = Param("device", "string", "Only this GPU, e.g. cuda:0.")
FINDING = Param("finding", "string", "A finding id or cause (e.g. input_bound, dataloader). Default: the one the "
                                     "headline quotes.")
FIGURE = Param("figure", "string", "A figure's key (e.g. gpu_idle_fraction, idle_gaps, diff_verdict); none: "
                                   "the list of keys.")
BRANCH = Param("branch", "string", "The branch. Default: main when it has runs, else the first branch.")


def analysis_tools(target: Param, base: Param, head: Param) -> list[ToolSpec]:
    """The tools over one analysis (`target`: a path, or a stored run) and the comparison of two (`base`
    before a change, `head` after it)."""
    t = target.name
    return [
        ToolSpec("analyze", f"The verdict of one {t}: what limits it, the time lost (the headline's figure), the "
                            "top findings with what removing each would save, and the headline figures.",
                 (target, LIMIT) if t == "run" else (target, Param("run", "string", "Log dirs: the run to analyse "
                                                                   "(default: the newest)."), LIMIT)),
        ToolSpec("explain", "One finding whole: its evidence and advice as the report writes them, every figure it "
                            "quotes with its unit, and the host operations behind its idle time.",
                 (target, FINDING, RANK, LIMIT)),
        ToolSpec("steps", "The steps, slowest first (or in order), with the median, p10, p90 and slowest step; per "
                          "step: duration, GPU busy, GPU idle, DataLoader wait, copies (ms).",
                 (target, RANK, Param("sort", "string", "duration: slowest first; step: in order.",
                                      default="duration", enum=("duration", "step")), TOP, LIMIT)),
        ToolSpec("gaps", "The GPU idle gaps, longest first, with their step and cause, and their total by cause.",
                 (target, RANK, DEVICE, Param("cause", "string", "Only gaps of this cause (e.g. dataloader)."),
                  Param("step", "integer", "Only gaps in this step.", minimum=0, maximum=2**53), TOP, LIMIT)),
        ToolSpec("kernels", "The GPU kernels by total time: count, total, mean (ms) and the host operator that "
                            "launched them.",
                 (target, RANK, DEVICE, Param("name", "string", "Only kernels whose name holds this text."), TOP,
                  LIMIT)),
        ToolSpec("operators", "The host operators and annotations by total, self or GPU-idle time (ms), with their "
                              "share of the steps.",
                 (target, RANK, Param("name", "string", "Only operators whose name holds this text."),
                  Param("sort", "string", "total, self or idle (their time while the GPU was idle).",
                        default="total", enum=("total", "self", "idle")), TOP, LIMIT)),
        ToolSpec("compare", "Did a change make it slower? BASE (before) against HEAD (after): the change verdict "
                            "(regressed, improved, unchanged, likely_slower, likely_faster, inconclusive), the "
                            "step-time shift with its 95% interval, the parts of the step that moved, the kernels "
                            "that moved.",
                 (base, head, LIMIT)),
        ToolSpec("define", "A figure's definition, in words one can check by hand (the one place it lives).",
                 (FIGURE, LIMIT)),
    ]


def service_tools(project_param: bool) -> list[ToolSpec]:
    """The tools over the service's history: a project's runs and its branch's history."""
    project = (Param("project", "string", "The project (default: the one configured)."),) if project_param else ()
    return [
        ToolSpec("runs", "A project's runs, newest first: id, branch, commit, status, verdict, median step (ms), "
                         "GPU idle, when uploaded.",
                 (*project, Param("branch", "string", "Only runs of this branch."),
                  Param("status", "string", "Only runs in this state.",
                        enum=("queued", "running", "done", "failed", "canceled")),
                  Param("verdict", "string", "Only runs with this verdict (e.g. input_bound)."), TOP, LIMIT)),
        ToolSpec("history", "A branch's history: each figure's latest value and its change points, newest first "
                            "(commit range, medians before and after, and what the comparison of the two sides "
                            "blames).",
                 (*project, BRANCH, Param("figure", "string", "Only this figure (e.g. step_time_ms)."), LIMIT)),
    ]


# --- calling a tool ----------------------------------------------------------------------------------
class Toolbox(Protocol):
    """What serves the tools: their table and a function per tool name (keyword arguments -> the answer's
    JSON text)."""

    def specs(self) -> Sequence[ToolSpec]: ...

    def function(self, name: str) -> Callable[..., str]: ...


def one_line(exc: BaseException) -> str:
    """An error as the one line the agent reads."""
    if isinstance(exc, (ToolInputError, AnswerError, TraceAnalyzerError)):
        return line(f"error: {exc}", 400)
    if isinstance(exc, OSError) and exc.filename is not None:
        return line(f"error: {exc.filename}: {exc.strerror or exc}", 400)
    if isinstance(exc, MemoryError):
        return "error: out of memory while analysing the input"
    return line(f"internal error: {type(exc).__name__}: {exc} (please report it)", 400)


def find(box: Toolbox, name: Any) -> ToolSpec | None:
    return next((s for s in box.specs() if s.name == name), None)


def call(box: Toolbox, name: str, arguments: Any) -> tuple[str, bool]:
    """(the answer's JSON text, False), or (one line saying what was wrong, True)."""
    spec = find(box, name)
    if spec is None:
        return f"error: no tool {line(name, 40)!r}: the tools are {', '.join(s.name for s in box.specs())}", True
    try:
        return box.function(spec.name)(**spec.check(arguments)), False
    except Exception as exc:  # every failure is one line for the agent, never a crash of the server
        return one_line(exc), True


# --- the JSON-RPC subset (streamable HTTP, stateless) -------------------------------------------------
@dataclass
class Reply:
    """What `handle` answers: a JSON-RPC message (None: nothing, HTTP 202) and the HTTP status."""

    message: dict[str, Any] | None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def _error(id_: Any, code: int, message: str, status: int = 200) -> Reply:
    return Reply({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}, status)


def _result(id_: Any, result: dict[str, Any]) -> Reply:
    return Reply({"jsonrpc": "2.0", "id": id_, "result": result})


def handle(message: Any, box: Toolbox, may_call: Callable[[ToolSpec], str | None]) -> Reply:
    """One JSON-RPC message. `may_call(spec)`: None when the caller may call the tool, else why not."""
    if isinstance(message, list):
        return _error(None, INVALID_REQUEST, "batches are not supported: send one message per request", 400)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message", 400)
    if "method" not in message:  # a response to a request we never sent: nothing to answer
        return Reply(None, 202)
    method, id_ = message.get("method"), message.get("id")
    if "id" not in message:  # a notification (initialized, cancelled): nothing to answer
        return Reply(None, 202)
    if not isinstance(id_, (str, int)) or isinstance(id_, bool):
        return _error(None, INVALID_REQUEST, "the id must be a string or an integer", 400)
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _error(id_, INVALID_PARAMS, "params must be an object")
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        return _result(id_, {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                             "serverInfo": {"name": SERVER_NAME, "version": __version__},
                             "instructions": INSTRUCTIONS})
    if method == "ping":
        return _result(id_, {})
    if method == "tools/list":
        return _result(id_, {"tools": [s.listing() for s in box.specs() if may_call(s) is None]})
    if method == "tools/call":
        spec = find(box, params.get("name"))
        if spec is None:
            return _error(id_, INVALID_PARAMS, f"no tool {line(params.get('name'), 40)!r}: the tools are "
                                               f"{', '.join(s.name for s in box.specs())}")
        refused = may_call(spec)
        if refused is not None:
            return _error(id_, FORBIDDEN, refused)
        text, is_error = call(box, spec.name, params.get("arguments"))
        return _result(id_, {"content": [{"type": "text", "text": text}], "isError": is_error})
    return _error(id_, METHOD_NOT_FOUND, f"method {line(method, 60)!r} is not served here (initialize, ping, "
                                         f"tools/list, tools/call)")
