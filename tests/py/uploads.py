"""uploads.py BASE KEY PROJECT FILE FOREIGN_SESSION

The stock Python Browserbase SDK (browserbase 1.22.0, no custom calls) against the platform:
creates a session, uploads FILE with `sessions.uploads.create`, then tries the names and
sessions that must be refused (a path, an absolute path, another project's session). Prints one
JSON line: the session, the upload's answer and each refusal's status and message.
"""

import json
import sys
import time

from browserbase import APIStatusError, Browserbase


def refusal(call):
    try:
        call()
    except APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "message": body.get("message", str(e))}
    return {"status": "accepted"}


def main():
    base, key, project, path, foreign = sys.argv[1:6]
    bb = Browserbase(api_key=key, base_url=base, max_retries=0, timeout=60)
    session = bb.sessions.create(project_id=project)
    deadline = time.monotonic() + 40
    while session.status != "RUNNING":
        if time.monotonic() > deadline:
            raise SystemExit(f"session {session.id} never became RUNNING")
        time.sleep(0.2)
        session = bb.sessions.retrieve(session.id)
    with open(path, "rb") as f:
        up = bb.sessions.uploads.create(session.id, file=f)
    bad = lambda name, sid=session.id: refusal(  # noqa: E731
        lambda: bb.sessions.uploads.create(sid, file=(name, b"x"))
    )
    print(
        json.dumps(
            {
                "session": {"id": session.id, "connectUrl": session.connect_url},
                "upload": up.to_dict(),
                "dotdot": bad("../../x"),
                "absolute": bad("/etc/passwd"),
                "foreign": bad("f.txt", foreign),
            }
        )
    )


main()
