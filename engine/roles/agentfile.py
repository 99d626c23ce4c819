"""The agent file (`graphs/agent.toml`, a fork's `trace/agent.toml`): models and model steps.

```toml
version = 1
[models.drafter]                 # engine.models.model_spec.ModelSpec
backend = "anthropic"
model = "claude-sonnet-4-5"

[steps.patch]                    # a model step: its runner is a model call
role = "patcher"                 # patcher | reproducer | reviewer (how the answer is read)
model = "drafter"
template = "../templates/agent/patcher.md.j2"
needs = ["advisory", "upstream", "sources"]
```

What the reviews must be before signing (approval, another model family than the Patcher's) is
the signing policy's `[review]` rule (policy/signing.toml), which `trace decide` applies.

Values a step may need: `advisory`, `upstream`, `sources`, `verify`, and `STEP.OUTPUT` of an
earlier step (patcher: diff, rationale, prompt, transcript; reproducer: script, prompt,
transcript). A reviewer step may need no step's prompt or transcript and no patcher's rationale:
the loader refuses it (exit 2), and the template sees only what its step needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import InputError
from engine.graphfile import find_line
from engine.loader import check_regular, read_document, resolve
from engine.models.model_spec import ModelSpec
from engine.paths import resolve_ref

Role = Literal["patcher", "reproducer", "reviewer"]
BASE_VALUES = ("advisory", "upstream", "sources", "verify")
OUTPUTS: dict[str, tuple[str, ...]] = {
    "patcher": ("diff", "rationale", "prompt", "transcript"),
    "reproducer": ("script", "prompt", "transcript"),
    "reviewer": ("verdict", "prompt", "transcript"),
}
# What no reviewer may see: the author's reasoning and everything said to or by the author.
HIDDEN_FROM_REVIEWER = ("prompt", "transcript", "rationale")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class StepSpec(_Strict):
    role: Role
    model: str
    template: str
    needs: list[str] = Field(default_factory=list)


class AgentFileSpec(_Strict):
    version: Literal[1]
    models: dict[str, ModelSpec]
    steps: dict[str, StepSpec]


class AgentStep(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    role: Role
    model: ModelSpec
    model_name: str
    template: Path
    needs: list[str]


class Agent(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path
    steps: list[AgentStep]  # in file order; every need refers to an earlier step

    def of_role(self, role: Role) -> list[AgentStep]:
        return [s for s in self.steps if s.role == role]


def _fail(msg: str, path: Path, text: str, keys: list[str], hint: str) -> InputError:
    return InputError(msg, file=path, key=".".join(keys), line=find_line(text, keys), hint=hint)


def load_agent(path: Path) -> Agent:
    check_regular(path, "agent file")
    path = resolve(path)
    doc = read_document(path, "agent file")
    text, data = doc.text, doc.data
    if "review" in data:
        raise _fail(
            "[review] moved to the signing policy: `trace decide` applies it to every drafted "
            "candidate",
            path,
            text,
            ["review"],
            "remove [review] here; set require_approval / require_different_family under "
            "[review] in the signing policy (policy/signing.toml or FORK/trace/policy/)",
        )
    try:
        spec = AgentFileSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        keys = [str(p) for p in err["loc"]]
        raise _fail(
            str(err["msg"]).removeprefix("Value error, "),
            path,
            text,
            keys,
            "see the agent file format in engine/roles/agentfile.py",
        ) from None
    steps: list[AgentStep] = []
    roles: dict[str, Role] = {}
    for sid, step in spec.steps.items():
        if step.model not in spec.models:
            raise _fail(
                f"step '{sid}' names model '{step.model}', which [models] does not declare",
                path,
                text,
                ["steps", sid, "model"],
                f"declare [models.{step.model}] or use one of: {', '.join(spec.models)}",
            )
        for need in step.needs:
            _check_need(sid, step, need, roles, path, text)
        template = resolve_ref(step.template, path.parent)
        if not template.is_file():
            raise _fail(
                f"template '{step.template}' does not exist (looked for {template})",
                path,
                text,
                ["steps", sid, "template"],
                "fix the path (relative to the agent file, or trace:templates/agent/...)",
            )
        roles[sid] = step.role
        steps.append(
            AgentStep(
                id=sid,
                role=step.role,
                model=spec.models[step.model],
                model_name=step.model,
                template=template,
                needs=step.needs,
            )
        )
    for role in ("patcher", "reproducer", "reviewer"):
        if role not in roles.values():
            raise _fail(
                f"no step has role '{role}'; trace draft runs patcher, reproducer and reviewer",
                path,
                text,
                ["steps"],
                f'add a [steps.NAME] with role = "{role}"',
            )
    return Agent(path=path, steps=steps)


def _check_need(
    sid: str, step: StepSpec, need: str, roles: dict[str, Role], path: Path, text: str
) -> None:
    keys = ["steps", sid, "needs"]
    if need in BASE_VALUES:
        return
    src, _, output = need.partition(".")
    if src not in roles:
        raise _fail(
            f"step '{sid}' needs '{need}': '{src}' is not an earlier step or a value "
            f"({', '.join(BASE_VALUES)})",
            path,
            text,
            keys,
            "order the steps so that what a step needs comes before it",
        )
    if output not in OUTPUTS[roles[src]]:
        raise _fail(
            f"step '{sid}' needs '{need}': a {roles[src]} step has no output '{output}' "
            f"(it has {', '.join(OUTPUTS[roles[src]])})",
            path,
            text,
            keys,
            "name one of the outputs listed",
        )
    if step.role == "reviewer" and (
        output in ("prompt", "transcript") or (roles[src] == "patcher" and output == "rationale")
    ):
        raise _fail(
            f"reviewer step '{sid}' may not need '{need}': a review sees only the advisory, the "
            "diff and the verify results, never the author's prompt, transcript or rationale",
            path,
            text,
            keys,
            "remove it from needs: the review must be independent of the Patcher's context",
        )
