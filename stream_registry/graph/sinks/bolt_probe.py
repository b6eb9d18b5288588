"""Run as a script, never imported: connect to a Bolt server and log in through pymgclient, then close.

Reads `{"host", "port", "username", "password"}` as JSON on stdin (a password
never on a command line or in an environment) and prints one JSON line:
`{"ok": true}`, or `{"error": "<class>: <message>"}`. A stream host checks a
plain `bolt://` sink at create this way, in a process of its own because
pymgclient holds the GIL through its network I/O, and one that starts in tens of
milliseconds because it imports nothing but pymgclient (sink_check.py).
"""
import json
import sys


def main() -> None:
    request = json.load(sys.stdin)
    try:
        import mgclient
    except ImportError as exc:
        print(json.dumps({"error": f"pymgclient is not installed (import mgclient: {exc})"}))
        return
    kwargs = {"host": request["host"], "port": request["port"]}
    if request.get("username") is not None:
        kwargs["username"], kwargs["password"] = request["username"], request.get("password") or ""
    try:
        mgclient.connect(**kwargs).close()
    except Exception as exc:  # the driver's error, whatever its class: the caller names the sink with it
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
