"""`trace schema NAME`: the JSON Schema of a file format."""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.policy.registry import SCHEMAS as POLICY_SCHEMAS

# name -> "module:attribute" of a pydantic model whose JSON Schema `trace schema NAME` prints.
SCHEMAS: dict[str, str] = {
    "pipeline": "engine.spec:PipelineFile",
    "candidate": "engine.candidate:CandidateFile",
    "machine": "engine.machinefile:MachineConfig",
    **POLICY_SCHEMAS,
    # model-drafted fixes (engine/roles, engine/models, engine/agent)
    "agent": "engine.roles.agentfile:AgentFileSpec",
    "eligibility": "engine.roles.eligibility:EligibilityFile",
    "transcript": "engine.models.transcript:Transcript",
    "draft": "engine.agent.draft_record:DraftRecord",
    "accuracy": "engine.roles.compare:Comparison",
}


def register(sub: Any) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of a file format")
    p.add_argument("name", nargs="?", default="pipeline", choices=sorted(SCHEMAS))
    p.set_defaults(handler=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    import importlib

    module, attr = SCHEMAS[args.name].split(":")
    model = getattr(importlib.import_module(module), attr)
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0
