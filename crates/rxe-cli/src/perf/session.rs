//! One run from the TCP connection to the last line of output: the
//! exchanges with the peer, the tables, and which loop runs.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener};

use anyhow::{anyhow, bail, Context, Result};
use rxe_verbs::{Device, PathMtu, Target};

use super::config::{Config, ALL_SIZES};
use super::handshake::{self as hs, Channel, Report, Verb};
use super::layout::Layout;
use super::report::{self as rep, TestInfo};
use super::setup::Perf;
use crate::place;
use crate::side_channel::{accept, connect_to};

/// perftest's buffer cycle and cache line, which both sides announce and
/// then take the larger of.
const PAGE_SIZE: u32 = 4096;
const CACHE_LINE: u32 = 64;

fn say<I: IntoIterator<Item = S>, S: AsRef<str>>(lines: I) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for l in lines {
        writeln!(out, "{}", l.as_ref())?;
    }
    out.flush()?;
    Ok(())
}

fn bind_listener(ip: Option<IpAddr>, port: u16) -> Result<TcpListener> {
    // perftest listens on every IPv4 address; with --ip, listen on that one
    // (its TCP side is IPv4 even when the device's address is IPv6).
    let addr = match ip {
        Some(IpAddr::V4(v4)) => v4,
        _ => Ipv4Addr::UNSPECIFIED,
    };
    TcpListener::bind((addr, port)).with_context(|| format!("couldn't listen to port {port}"))
}

/// Everything from the TCP connection to the last line of output.
pub(super) fn session(dev: &Device, target: &Target, cfg: &Config) -> Result<()> {
    // Every loop here that waits polls the CQ at every empty wait (the
    // latency loops also while they watch memory for the peer's WRITE), so
    // the driver thread can leave the arrivals to them while they do; a
    // side that does not poll (a WRITE or READ server) keeps its driver
    // watching. For the 1 MiB streams that is a third more throughput for
    // less CPU: no driver wake-up per arriving batch (docs/performance.md).
    // `RXE_PREFER_BUSY_POLL=0` keeps the driver watching, for comparison.
    let prefer = std::env::var_os("RXE_PREFER_BUSY_POLL").is_none_or(|v| v != "0");
    dev.set_prefer_busy_poll(prefer);
    let port = dev.query_port(rxe_verbs::PORT)?;
    let attr = dev.query_device()?;
    let (gid_index, gid) = place::local_gid(dev, target, cfg.gid_index)?;
    let my_mtu = match cfg.mtu {
        Some(m) if m.bytes() > port.active_mtu.bytes() => {
            eprintln!(
                " Requested MTU {} is higher than the port's active MTU {}: using {}",
                m.bytes(),
                port.active_mtu.bytes(),
                port.active_mtu.bytes()
            );
            port.active_mtu
        }
        Some(m) => m,
        None => port.active_mtu,
    };

    let stream = match &cfg.host {
        None => {
            let ip = match target {
                Target::Address(ip) => Some(*ip),
                Target::Addresses(v) => v.first().copied(),
                Target::Interface(_) => None,
            };
            let listener = bind_listener(ip, cfg.port)?;
            say(rep::WAITING)?;
            let s = accept(&listener, cfg.timeout)?;
            drop(listener);
            s
        }
        Some(h) => connect_to(h, cfg.port, cfg.timeout)?,
    };
    stream.set_read_timeout(cfg.timeout)?;
    stream.set_write_timeout(cfg.timeout)?;
    stream.set_nodelay(true)?;
    let mut ch = Channel::new(stream, cfg.client());
    let tcp = |e: hs::PerfHandshakeError| -> anyhow::Error {
        match &e {
            hs::PerfHandshakeError::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                anyhow!(
                    "the peer did not answer on the TCP connection within {:.1} s",
                    cfg.timeout.unwrap_or_default().as_secs_f64()
                )
            }
            _ => anyhow::Error::new(e),
        }
    };

    ch.versions(hs::VERSION)
        .map_err(tcp)
        .context("failed to exchange versions")?;
    let (cycle, cache) = ch
        .sys_data(PAGE_SIZE, CACHE_LINE)
        .map_err(tcp)
        .context("failed to exchange system data")?;
    if !(64..=1 << 24).contains(&cycle) || !(8..=4096).contains(&cache) {
        bail!("the peer's buffer cycle {cycle} or cache line {cache} is out of range");
    }
    let mtu = ch
        .mtu(my_mtu.as_ibv())
        .map_err(tcp)
        .context("failed to exchange the MTU")?;
    let mtu = PathMtu::from_ibv(mtu).ok_or_else(|| anyhow!("bad MTU {mtu}"))?;

    let out_reads: u16 = if cfg.reads() {
        u16::from(attr.max_qp_rd_atom)
    } else {
        1
    };
    let client = cfg.client();
    let depth = if client {
        Some(("TX", cfg.tx_depth))
    } else if cfg.receives() {
        Some(("RX", cfg.rx_depth))
    } else {
        None
    };
    say(rep::info_block(&TestInfo {
        verb: cfg.verb,
        lat: cfg.lat,
        cmp_swap: cfg.cmp_swap,
        device: dev.name().to_string(),
        qps: cfg.qps,
        depth,
        cq_mod: (!cfg.lat).then_some(cfg.cq_mod),
        mtu: mtu.bytes(),
        gid_index,
        out_reads,
    }))?;

    let lay = Layout::new(cfg, u64::from(cycle), u64::from(cache))?;
    // -a: the client (both sides of ib_write_lat) runs each size in turn
    // over the memory laid out for the largest; a passive server only needs
    // that memory.
    let write_lat = cfg.lat && cfg.verb == Verb::Write;
    let sizes: Vec<Config> = if cfg.all && (client || write_lat) {
        ALL_SIZES
            .map(|k| Config {
                size: 1 << k,
                ..cfg.clone()
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut s = Perf::new(
        dev,
        cfg,
        lay,
        mtu,
        (gid_index, gid),
        port.lid,
        (out_reads, attr.max_qp_init_rd_atom.max(1)),
    )?;
    let mine = s.mine.clone();
    say(mine
        .iter()
        .flat_map(|k| rep::address_lines(true, k, cfg.verb)))?;
    let theirs = ch
        .connect_round(&mine)
        .map_err(tcp)
        .context("failed to exchange data between server and client")?;
    say(theirs
        .iter()
        .flat_map(|k| rep::address_lines(false, k, cfg.verb)))?;
    s.check_peer(&theirs)?;
    s.theirs = theirs.clone();
    s.connect().context("unable to connect the QPs")?;
    s.prepare()?;
    ch.ready(&cfg.flow(), &mine, &theirs)
        .map_err(tcp)
        .context("failed to exchange data between server and client")?;

    let read_lat_server = cfg.lat && cfg.verb == Verb::Read && !client;
    if read_lat_server {
        say([rep::RULE])?;
    } else if cfg.lat {
        say([rep::RULE, rep::LAT_HEADER])?;
    } else {
        say([rep::RULE.to_string(), rep::bw_header(cfg.unit)])?;
    }

    let flow = cfg.flow();
    let mut report = Report {
        size: cfg.size,
        iters: cfg.iters * cfg.qps as u64,
        ..Report::default()
    };
    if cfg.lat && cfg.all {
        for c in &sizes {
            s.cfg = c;
            s.lay = Layout::new(c, u64::from(cycle), u64::from(cache))?;
            let st = if write_lat {
                s.write_lat()?
            } else {
                s.read_lat()?
            };
            say([rep::lat_row(c.size, c.iters, &st)])?;
        }
        if !sizes.is_empty() {
            say([rep::RULE])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if cfg.lat {
        let stats = match (cfg.verb, client) {
            (Verb::Write, _) => Some(s.write_lat()?),
            (Verb::Send, _) => Some(s.send_lat()?),
            (Verb::Read, true) => Some(s.read_lat()?),
            _ => None,
        };
        if let Some(st) = stats {
            say([
                rep::lat_row(cfg.size, cfg.iters, &st),
                rep::RULE.to_string(),
            ])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if client && cfg.all {
        let mut notes = Vec::new();
        for c in &sizes {
            s.cfg = c;
            s.lay = Layout::new(c, u64::from(cycle), u64::from(cache))?;
            report = s.bw_sender()?;
            say([rep::bw_row(&report, cfg.unit)])?;
            notes.extend(s.data_note.take());
        }
        say([rep::RULE])?;
        if !notes.is_empty() {
            // One line for all sizes; a failed size ended the run already.
            let uniform = notes.iter().all(|n| n.contains("uniform"));
            say([format!(
                " Data check: at each of {} sizes, every READ of a position returned the bytes of the first{}",
                notes.len(),
                if uniform { "; the peer's buffer is uniform, so this proves little" } else { "" }
            )])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if client {
        report = s.bw_sender()?;
        say([rep::bw_row(&report, cfg.unit), rep::RULE.to_string()])?;
        if let Some(note) = s.data_note.take() {
            say([note])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if cfg.verb == Verb::Send {
        report = s.send_receiver()?;
        say([rep::bw_row(&report, cfg.unit), rep::RULE.to_string()])?;
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else {
        // The NIC does the work; wait for the client's report.
        if cfg.busy {
            s.busy_until_readable(ch.stream(), cfg.timeout)
                .context("failed to wait for the client's report")?;
        }
        let theirs_report = ch
            .finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to exchange the report between server and client")?
            .unwrap_or_default();
        say([rep::bw_row(&theirs_report, cfg.unit), rep::RULE.to_string()])?;
        if cfg.check {
            let note = s.check_target()?;
            if !note.is_empty() {
                say([note])?;
            }
        }
    }
    Ok(())
}
