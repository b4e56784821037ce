//! `rxe info`: add a device for the length of the command and describe it
//! as `ibv_devinfo` (and `ibv_devinfo -v`) describes an RDMA device.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::{bail, Result};
use rxe_verbs::attr::device_cap;
use rxe_verbs::{AtomicCap, Device, LinkLayer, PortState, Target};

use crate::ibv_format::{gid_line, guid_str, mtu_str};
use crate::place::{self, Place};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    place: Place,
    /// Only this port (rxe devices have one, port 1).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
    ib_port: Option<u8>,
    /// Print every attribute, as `ibv_devinfo -v`.
    #[arg(short, long)]
    verbose: bool,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    if let Some(p) = args.ib_port {
        if p != rxe_verbs::PORT {
            bail!("invalid port {p}: an rxe device has port 1 only");
        }
    }
    let targets = match args.place.target() {
        Some(t) => vec![t],
        // Like ibv_devinfo without -d: every device there could be.
        None => rxe_net::netif::list_interfaces()?
            .into_iter()
            .filter(|i| i.up && i.addrs.iter().any(|a| place::usable_address(*a)))
            .map(|i| Target::Interface(i.name))
            .collect(),
    };
    if targets.is_empty() {
        bail!("no interface is up with an address (see `rxe devices --all`)");
    }
    // Add them all first, so that each gets its own name (rxe0, rxe1, ...)
    // as ibv_devinfo lists each device.
    let mut devs = Vec::new();
    let mut failed = false;
    for t in &targets {
        match place::add_device(t, None, args.place.congestion.config()) {
            Ok(dev) => devs.push(dev),
            // With one target the error is the command's; with several,
            // report it and go on to the others.
            Err(e) if targets.len() == 1 => return Err(e),
            Err(e) => {
                eprintln!("rxe: {e:#}");
                failed = true;
            }
        }
    }
    let result = devs.iter().try_for_each(|d| describe(d, args.verbose));
    for d in &devs {
        let _ = d.remove();
    }
    result?;
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn describe(dev: &Device, verbose: bool) -> Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    write_device(&mut out, dev, verbose)?;
    out.flush()?;
    Ok(())
}

/// The `ibv_devinfo` text of one device. rxe's additions: the port's
/// netdev, and the GID table also without `-v` (a RoCE user needs the GID
/// index for `-g`).
pub fn write_device(out: &mut impl Write, dev: &Device, verbose: bool) -> Result<()> {
    let a = dev.query_device()?;
    writeln!(out, "hca_id:\t{}", dev.name())?;
    writeln!(out, "\ttransport:\t\t\tInfiniBand (0)")?;
    writeln!(out, "\tfw_ver:\t\t\t\t{}", a.fw_ver)?;
    writeln!(out, "\tnode_guid:\t\t\t{}", guid_str(a.node_guid))?;
    writeln!(out, "\tsys_image_guid:\t\t\t{}", guid_str(a.sys_image_guid))?;
    writeln!(out, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id)?;
    writeln!(out, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id)?;
    writeln!(out, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver)?;
    writeln!(out, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt)?;
    if verbose {
        writeln!(out, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size)?;
        writeln!(out, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap)?;
        writeln!(out, "\tmax_qp:\t\t\t\t{}", a.max_qp)?;
        writeln!(out, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr)?;
        writeln!(out, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags)?;
        let mut known = 0;
        for (bit, name) in device_cap::NAMES {
            known |= bit;
            if a.device_cap_flags & bit != 0 {
                writeln!(out, "\t\t\t\t\t{name}")?;
            }
        }
        if a.device_cap_flags & !known != 0 {
            writeln!(
                out,
                "\t\t\t\t\tUnknown flags: 0x{:X}",
                a.device_cap_flags & !known
            )?;
        }
        writeln!(out, "\tmax_sge:\t\t\t{}", a.max_sge)?;
        writeln!(out, "\tmax_sge_rd:\t\t\t{}", a.max_sge_rd)?;
        writeln!(out, "\tmax_cq:\t\t\t\t{}", a.max_cq)?;
        writeln!(out, "\tmax_cqe:\t\t\t{}", a.max_cqe)?;
        writeln!(out, "\tmax_mr:\t\t\t\t{}", a.max_mr)?;
        writeln!(out, "\tmax_pd:\t\t\t\t{}", a.max_pd)?;
        writeln!(out, "\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom)?;
        writeln!(out, "\tmax_ee_rd_atom:\t\t\t0")?;
        writeln!(out, "\tmax_res_rd_atom:\t\t{}", a.max_res_rd_atom)?;
        writeln!(out, "\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom)?;
        writeln!(out, "\tmax_ee_init_rd_atom:\t\t0")?;
        let atomic = match a.atomic_cap {
            AtomicCap::None => "ATOMIC_NONE (0)",
            AtomicCap::Hca => "ATOMIC_HCA (1)",
            AtomicCap::Glob => "ATOMIC_GLOB (2)",
        };
        writeln!(out, "\tatomic_cap:\t\t\t{atomic}")?;
        // rxe has no end-to-end contexts, memory windows or raw QPs: zero,
        // as ibv_devinfo shows for a device without them.
        writeln!(out, "\tmax_ee:\t\t\t\t0")?;
        writeln!(out, "\tmax_rdd:\t\t\t0")?;
        writeln!(out, "\tmax_mw:\t\t\t\t{}", a.max_mw)?;
        writeln!(out, "\tmax_raw_ipv6_qp:\t\t0")?;
        writeln!(out, "\tmax_raw_ethy_qp:\t\t0")?;
        writeln!(out, "\tmax_mcast_grp:\t\t\t{}", a.max_mcast_grp)?;
        writeln!(out, "\tmax_mcast_qp_attach:\t\t{}", a.max_mcast_qp_attach)?;
        writeln!(
            out,
            "\tmax_total_mcast_qp_attach:\t{}",
            a.max_total_mcast_qp_attach
        )?;
        writeln!(out, "\tmax_ah:\t\t\t\t{}", a.max_ah)?;
        writeln!(out, "\tmax_fmr:\t\t\t0")?;
        writeln!(out, "\tmax_srq:\t\t\t{}", a.max_srq)?;
        if a.max_srq > 0 {
            writeln!(out, "\tmax_srq_wr:\t\t\t{}", a.max_srq_wr)?;
            writeln!(out, "\tmax_srq_sge:\t\t\t{}", a.max_srq_sge)?;
        }
        writeln!(out, "\tmax_pkeys:\t\t\t{}", a.max_pkeys)?;
        writeln!(out, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay)?;
        writeln!(out, "\tmax_inline_data:\t\t{}", a.max_inline_data)?;
    }
    for port in 1..=a.phys_port_cnt {
        let p = dev.query_port(port)?;
        writeln!(out, "\t\tport:\t{port}")?;
        writeln!(out, "\t\t\tstate:\t\t\t{}", p.state.ibv_name())?;
        writeln!(out, "\t\t\tmax_mtu:\t\t{}", mtu_str(p.max_mtu.bytes()))?;
        writeln!(
            out,
            "\t\t\tactive_mtu:\t\t{}",
            mtu_str(p.active_mtu.bytes())
        )?;
        writeln!(out, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid)?;
        writeln!(out, "\t\t\tport_lid:\t\t{}", p.lid)?;
        writeln!(out, "\t\t\tport_lmc:\t\t0x00")?;
        let ll = match p.link_layer {
            LinkLayer::Ethernet => "Ethernet",
        };
        writeln!(out, "\t\t\tlink_layer:\t\t{ll}")?;
        writeln!(out, "\t\t\tnetdev:\t\t\t{}", p.netdev)?;
        if verbose {
            writeln!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz)?;
            writeln!(out, "\t\t\tmax_vl_num:\t\t1 (1)")?;
            writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len)?;
            writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len)?;
            writeln!(out, "\t\t\tsubnet_timeout:\t\t0")?;
            writeln!(out, "\t\t\tinit_type_reply:\t0")?;
            let width = match p.active_width {
                1 => "1",
                2 => "4",
                4 => "8",
                8 => "12",
                16 => "2",
                _ => "invalid width",
            };
            writeln!(out, "\t\t\tactive_width:\t\t{width}X ({})", p.active_width)?;
            let speed = match p.active_speed {
                1 => "2.5 Gbps",
                2 => "5.0 Gbps",
                4 | 8 => "10.0 Gbps",
                16 => "14.0 Gbps",
                32 => "25.0 Gbps",
                64 => "50.0 Gbps",
                _ => "invalid speed",
            };
            writeln!(out, "\t\t\tactive_speed:\t\t{speed} ({})", p.active_speed)?;
            let phys = match p.state {
                PortState::Active => "LINK_UP (5)",
                PortState::Down => "DISABLED (3)",
            };
            writeln!(out, "\t\t\tphys_state:\t\t{phys}")?;
            // Not an ibv_devinfo line: rxe's ECN and DCQCN settings, under
            // ConnectX firmware's parameter names.
            writeln!(out, "\t\t\tcongestion control (ECN, CNP, DCQCN):")?;
            crate::congestion::describe(out, &dev.congestion())?;
        }
        for g in dev.gid_table(port)? {
            writeln!(out, "{}", gid_line(g.index, &g.gid))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
