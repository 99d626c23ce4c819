"""`python -m tests.model_fake --agent FILE [--wrong]`: serve the canned answers on 127.0.0.1
(an ephemeral port), write an agent file pointing at it, and run until interrupted. For the
README's example; the key is $FAKE_MODEL_KEY = test-key-not-secret."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tests.model_fake import FakeModelServer, answers


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tests.model_fake")
    p.add_argument("--agent", type=Path, required=True, help="agent file to write")
    p.add_argument("--wrong", action="store_true", help="draft the plausible wrong fix")
    args = p.parse_args()
    patch = answers.WRONG_PATCH if args.wrong else answers.GOOD_PATCH
    review = answers.REQUEST_CHANGES if args.wrong else answers.APPROVE
    with FakeModelServer(answers.by_role(patch, reviewer=review)) as srv:
        args.agent.write_text(answers.agent_toml(srv.anthropic_url, srv.openai_url))
        print(f"fake model server on {srv.base}; agent file {args.agent}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
