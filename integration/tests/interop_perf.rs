//! `rxe perf` against perftest 4.5's own `ib_*_bw` and `ib_*_lat` on the
//! kernel's Soft-RoCE in the reference guest, in both directions. Both exit
//! statuses must be 0, and each side must print its result table. perftest
//! does not check data; rxe checks what it can see of it: as ib_read_bw's
//! client every READ (`--chk-same-reads`), and in ib_write_lat each side
//! waits for the peer's exact iteration number in the byte it polls.
//!
//! Ignored by a plain `cargo test`; `scripts/interop.sh` runs them.

use std::time::Duration;

use rxe_integration::peer::*;

/// perftest's `tool` with `opts` against `rxe perf ours_args`, guest as
/// server then as client.
fn both_ways(tool: &str, opts: &str, ours: &str) {
    if !require_peer() {
        return;
    }
    let _turn = exclusive();
    // As the client of ib_read_bw, rxe checks the data it reads: the
    // server's buffer is random and does not change, so every READ of a
    // position must return the bytes of the first.
    let read_bw = ours.starts_with("read") && !ours.contains("--lat");
    let args = |server: bool| -> Vec<String> {
        let mut v = vec!["perf".to_string()];
        v.extend(ours.split_whitespace().map(str::to_string));
        v.extend(["--ip", HOST_IP, "--timeout", "150"].map(str::to_string));
        if !server {
            if read_bw {
                v.push("--chk-same-reads".to_string());
            }
            v.push(GUEST_IP.to_string());
        }
        v
    };
    let job = GuestJob::start(&format!("{tool} -d rxe0 -x 1 -F {opts}"));
    assert!(
        guest_waitport(18515, 30),
        "the guest's {tool} did not listen"
    );
    let (rs, rout) = finish(rxe_in_netns(&args(false), 200));
    let (gs, gout) = job.wait(200);
    assert!(
        rs == 0 && gs == 0,
        "{tool} {opts}, guest server: rxe exit {rs}, guest exit {gs}\n--- rxe:\n{rout}\n--- guest:\n{gout}"
    );
    assert!(rout.contains("#bytes"), "{rout}");
    if read_bw {
        assert!(rout.contains(" Data check: "), "{rout}");
        assert!(!rout.contains("uniform"), "{rout}");
    }
    let server = rxe_in_netns(&args(true), 200);
    assert!(
        netns_waitport(18515, Duration::from_secs(30)),
        "rxe's server did not listen"
    );
    let (gs, gout) = guest_exec(&format!("{tool} -d rxe0 -x 1 -F {opts} {HOST_IP}"), 200);
    let (rs, rout) = finish(server);
    assert!(
        rs == 0 && gs == 0,
        "{tool} {opts}, rxe server: rxe exit {rs}, guest exit {gs}\n--- rxe:\n{rout}\n--- guest:\n{gout}"
    );
    assert!(gout.contains("#bytes"), "{gout}");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn write_bw() {
    both_ways("ib_write_bw", "-n 300", "write -n 300");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn read_bw_64k() {
    both_ways("ib_read_bw", "-n 200 -s 65536", "read -n 200 -s 65536");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn send_bw() {
    both_ways("ib_send_bw", "-n 300", "send -n 300");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn atomic_bw_fetch_add() {
    both_ways("ib_atomic_bw", "-n 300", "atomic -n 300");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn atomic_bw_cmp_swap() {
    both_ways(
        "ib_atomic_bw",
        "-n 300 -A CMP_AND_SWAP",
        "atomic -n 300 --cmp-swap",
    );
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn write_lat() {
    both_ways("ib_write_lat", "-n 200", "write --lat -n 200");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn read_lat() {
    both_ways("ib_read_lat", "-n 200", "read --lat -n 200");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn send_lat() {
    both_ways("ib_send_lat", "-n 200", "send --lat -n 200");
}

/// ib_write_bw, ib_read_bw and ib_send_bw in both directions under netem
/// loss 2%, reordering 5% and duplication 1% on both directions of the
/// link; perftest itself checks every completion's status, and rxe, as
/// ib_read_bw's client, every byte it reads. (perftest has no data check
/// of its own; the SEND data under the same faults is checked byte for
/// byte by `interop_pingpong::rc_64k_under_loss_reordering_and_duplication`.)
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn bw_under_loss_reordering_and_duplication() {
    if !require_peer() {
        return;
    }
    let faults = {
        let _turn = exclusive();
        Faults::on()
    };
    both_ways("ib_write_bw", "-n 100 -s 16384", "write -n 100 -s 16384");
    both_ways("ib_read_bw", "-n 100 -s 16384", "read -n 100 -s 16384");
    both_ways("ib_send_bw", "-n 100 -s 16384", "send -n 100 -s 16384");
    drop(faults);
}
