# Sourced by the multi-process yolo-train tests (test_yolo_train_peers.sh,
# test_yolo_train_partial.sh): an origin and a rendezvous port on loopback.

# origin_start DIR LOG: `$ffr serve DIR` in the background (its pid in $srv, its log in LOG, where
# it counts the body bytes it sent); sets $port once it listens (empty after 5 s without).
origin_start() {
    "$ffr" serve "$1" --port 0 >"$2" 2>&1 &
    srv=$!
    port=""
    local i
    for i in $(seq 50); do
        port=$(sed -n 's#.*http://127.0.0.1:\([0-9]*\)/ffr/.*#\1#p' "$2")
        [ -n "$port" ] && break
        sleep 0.1
    done
}

# free_port prints a port p with p + 1 free too (the rendezvous listens on MASTER_PORT + 1).
# Call it after origin_start: two bind(0) calls in a row can get neighbouring ports.
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
