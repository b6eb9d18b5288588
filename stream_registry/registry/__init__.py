"""The registry: stream names to running consumers, their durable state and their poll loops."""
from .registry import RestartBackoff, StreamRegistry
from .runners.runner import Isolation

__all__ = ["Isolation", "RestartBackoff", "StreamRegistry"]
