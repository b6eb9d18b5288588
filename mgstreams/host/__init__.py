"""The stream host (`mgstreams serve`): owns a registry and serves its HTTP API."""
