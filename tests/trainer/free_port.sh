# Sourced by the multi-process yolo-train tests: free_port prints a loopback port p with p + 1
# free too (the rendezvous listens on MASTER_PORT + 1). Pick it after any server of the test
# has its port: two bind(0) calls in a row can get neighbouring ports.
free_port() {
    python3 - <<'PY'
import socket
for _ in range(50):
    a, b = socket.socket(), socket.socket()
    try:
        a.bind(("127.0.0.1", 0))
        p = a.getsockname()[1]
        b.bind(("127.0.0.1", p + 1))
        print(p)
        break
    except OSError:
        pass
    finally:
        a.close()
        b.close()
PY
}
