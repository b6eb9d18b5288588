"""The host's own transformations directory (issue 46, item 1): `<state dir>/transformations`, created private at
the host's first start, named in its ready line, searched by default; a module dropped there after the host
started is found by the next create and run by the stream's process, without a restart. Other directories stay
the operator's setting ($MGSTREAMS_QUERY_MODULES_DIR)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import uuid

import httpx
from stream_helpers import statement_lines, wait_until

OWN = textwrap.dedent('''
    """A transformation of the operator's own, written after the host started."""
    import json


    def amount(messages):
        out = []
        for i in range(messages.total_messages()):
            message = messages.message_at(i)
            out.append({"query": "MERGE (t:Amount {offset: $offset}) SET t.value = $value",
                        "parameters": {"offset": message.offset(), "value": json.loads(message.payload())["i"]}})
        return out
''')


def test_a_module_dropped_in_the_state_dirs_transformations_runs_without_a_restart(kafka, tmp_path):
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "MGSTREAMS_QUERY_MODULES_DIR"}
    env["MGSTREAMS_OUTPUT_DIRS"] = ""    # the default: <state dir>/output
    host = subprocess.Popen([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(state), "--listen",
                             "127.0.0.1:0", "--no-token"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=tmp_path, env=env)
    try:
        ready = host.stdout.readline()
        own = state.resolve() / "transformations"
        assert f"your transformations: {own}" in ready, ready
        assert own.is_dir() and stat.S_IMODE(own.stat().st_mode) == 0o700, oct(own.stat().st_mode)
        url = ready.split("serving at ", 1)[1].split()[0]
        topic = kafka.new_topic(partitions=1)
        kafka.produce(topic, 3, partitions=1)
        body = {"name": "own", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                "transform": "amounts_mine.amount", "consumer_group": f"own_{uuid.uuid4().hex[:8]}",
                "sink": f"cypherl://{state.resolve()}/output/own.cypherl"}
        with httpx.Client(base_url=url, timeout=60) as api, kafka.quick_rebalance():
            refused = api.post("/streams", json=body)
            assert refused.status_code == 400 and "transformations" in refused.json()["error"], refused.text
            (own / "amounts_mine.py").write_text(OWN)   # while the host runs
            created = api.post("/streams", json=body)
            assert created.status_code == 201, created.text
            assert api.put("/streams/own/start").status_code == 200
            out = state / "output" / "own.cypherl"
            wait_until(lambda: out.exists() and len(statement_lines(out)) == 3, timeout=60, what="3 statements")
            assert all("MERGE (t:Amount" in line for line in statement_lines(out))
            # another directory is not searched unless the operator names it
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            (elsewhere / "not_allowed.py").write_text(OWN)
            other = api.post("/streams", json={**body, "name": "other", "transform": "not_allowed.amount"})
            assert other.status_code == 400, other.text
    finally:
        host.terminate()
        host.wait(60)
        host.stdout.close()
