# Sourced by the multi-process yolo-train tests (test_yolo_train_peers.sh,
# test_yolo_train_partial.sh, test_yolo_train_fill_wait.sh): their dataset, an origin and a
# rendezvous port on loopback.

# pack_origin IMAGES SEED: $synth's IMAGES images of seed SEED packed by $pack at 96 pixels in
# 64 KiB shards into $work/origin/train.ffr; the exit status of the first step that fails.
pack_origin() {
    "$synth" "$work/s" --split train2017="$1" --seed "$2" --min-side 60 --max-side 120 >/dev/null 2>&1 &&
        mkdir -p "$work/origin" &&
        "$pack" "$work/s" --split train2017 -o "$work/origin/train.ffr" --size 96 --shard-size 64K -q 2>/dev/null
}

# origin_start DIR LOG: `$ffr serve DIR` in the background (its pid in $srv, its log in LOG, where
# it counts the body bytes it sent); sets $port once it listens (empty after 5 s without).
origin_start() {
    "$ffr" serve "$1" --port 0 >"$2" 2>&1 &
    srv=$!
    port=$(await_port "$2" 's#.*http://127.0.0.1:\([0-9]*\)/ffr/.*#\1#p')
}

# await_port LOG SED prints the port that the sed script SED finds in LOG, waiting up to 5 s
# for the server to write it (nothing after that).
await_port() {
    local i p
    for i in $(seq 50); do
        p=$(sed -n "$2" "$1")
        [ -n "$p" ] && break
        sleep 0.1
    done
    echo "$p"
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

# throttle_start UPSTREAM_PORT BYTES_PER_S LOG: a TCP proxy on loopback in the background (its
# pid in $thr) that passes the upstream's replies on at BYTES_PER_S in all, as a slow origin
# would; sets $tport once it listens (empty after 5 s without).
throttle_start() {
    python3 -u - "$1" "$2" >"$3" 2>&1 <<'PY' &
import asyncio, sys, time
up, rate = int(sys.argv[1]), float(sys.argv[2])
free_at = 0.0  # when the shared link is free again, over every connection

async def pipe(r, w, slow):
    global free_at
    try:
        while data := await r.read(4096):
            if slow:
                free_at = max(free_at, time.monotonic()) + len(data) / rate
                await asyncio.sleep(max(0.0, free_at - time.monotonic()))
            w.write(data)
            await w.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        w.close()

async def client(cr, cw):
    try:
        ur, uw = await asyncio.open_connection("127.0.0.1", up)
    except OSError:
        cw.close()
        return
    await asyncio.gather(pipe(cr, uw, False), pipe(ur, cw, True))

async def main():
    srv = await asyncio.start_server(client, "127.0.0.1", 0)
    print("port", srv.sockets[0].getsockname()[1])
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
PY
    thr=$!
    tport=$(await_port "$3" 's/^port \([0-9]*\)$/\1/p')
}
