"""Kafka access: the one consumer factory and the batched offset/watermark queries."""
