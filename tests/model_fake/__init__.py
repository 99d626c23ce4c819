"""A loopback fake model server speaking the Anthropic Messages and OpenAI chat wire formats.

Test code only: it listens on 127.0.0.1 (an ephemeral port), is started and stopped by the test,
records every request's raw body and headers, and answers from a script the test gives it.
"""

from tests.model_fake.server import FakeModelServer, Raw, Recorded, Trickle

__all__ = ["FakeModelServer", "Raw", "Recorded", "Trickle"]
