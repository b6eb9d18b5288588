"""The host's durable state: the state store (SQLite; the one truth of a stream's definition, its desired
state and its pending offset changes), the lock that gives one registry its state directory, and change_sets,
the one owner of pending offset changes on the host's side (their rows, their waits, their history)."""
