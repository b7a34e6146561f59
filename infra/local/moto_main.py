"""Run a moto server on 127.0.0.1 in its own process; print its port; exit when stdin closes.

Started by :class:`infra.local.stack.MotoServer`. Closing stdin (the parent stopped or died)
ends it, so a moto server never outlives the local stack.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    print(json.dumps({"host": host, "port": server.get_host_and_port()[1]}), flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    server.stop()


if __name__ == "__main__":
    main()
