"""The registry: stream names to running consumers, their durable state and their poll loops."""
from .registry import StreamRegistry

__all__ = ["StreamRegistry"]
