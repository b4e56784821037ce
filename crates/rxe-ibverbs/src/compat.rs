//! The rest of the public ABI: the sysfs helpers (answered for our virtual
//! device paths), the `*_str` strings (the texts users know from
//! rdma-core), rate conversions, fork handling (nothing to do: rxe pins
//! nothing), the kernel-struct copies librdmacm uses, and what rxe does
//! not have (importing objects of another process, L2 address
//! resolution), which fail with EOPNOTSUPP.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::kern::*;
use rxe_verbs_abi::*;

use crate::errno::set_errno;

/// Where our devices' `ibdev_path` points; `ibv_read_sysfs_file` answers
/// for it instead of reading the file system.
pub const VIRTUAL_IBDEV_ROOT: &str = "/sys/class/infiniband";

/// The virtual sysfs file `file` of device `name`, if we serve it.
pub fn virtual_file(name: &str, file: &str) -> Option<Result<String, c_int>> {
    let dev = crate::devices::list_known()
        .into_iter()
        .find(|d| d.name == name)?;
    let probe = dev.probe.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let guid = |g: u64| {
        format!(
            "{:04x}:{:04x}:{:04x}:{:04x}",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    };
    let v = match file {
        "node_type" => Ok("1: CA".to_string()),
        // No board: ibv_devinfo then prints no board_id line.
        "board_id" | "hca_type" | "hw_rev" => Err(libc::ENOENT),
        "node_guid" => Ok(guid(probe.map(|p| p.attr.node_guid).unwrap_or(0))),
        "sys_image_guid" => Ok(guid(probe.map(|p| p.attr.sys_image_guid).unwrap_or(0))),
        "fw_ver" => Ok(probe.map(|p| p.attr.fw_ver).unwrap_or_default()),
        "ports/1/link_layer" => Ok("Ethernet".to_string()),
        "ports/1/state" => Ok(match probe.map(|p| p.port.state) {
            Some(rxe_verbs::PortState::Active) => "4: ACTIVE".to_string(),
            _ => "1: DOWN".to_string(),
        }),
        f => {
            if let Some(i) = f.strip_prefix("ports/1/gids/") {
                let i: usize = i.parse().ok()?;
                let g = probe
                    .and_then(|p| p.gids.get(i).copied())
                    .unwrap_or_default();
                Ok(g.to_sysfs_string())
            } else if let Some(i) = f.strip_prefix("ports/1/gid_attrs/types/") {
                let i: usize = i.parse().ok()?;
                match probe.and_then(|p| p.gids.get(i).copied()) {
                    Some(_) => Ok("RoCE v2".to_string()),
                    None => Err(libc::EINVAL),
                }
            } else if let Some(i) = f.strip_prefix("ports/1/pkeys/") {
                match i {
                    "0" => Ok("0xffff".to_string()),
                    _ => Ok("0x0000".to_string()),
                }
            } else {
                Err(libc::ENOENT)
            }
        }
    };
    Some(v)
}

export! {"IBVERBS_1.0" fn ibv_get_sysfs_path() -> *const c_char, fail = c"/sys".as_ptr(), {
    static PATH: OnceLock<std::ffi::CString> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::var("SYSFS_PATH").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/sys".into());
        std::ffi::CString::new(p.trim_end_matches('/')).unwrap_or_else(|_| c"/sys".into())
    })
    .as_ptr()
}}

export! {"IBVERBS_1.0" fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int, fail = -1, {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: C strings from the caller.
    let (d, f) = unsafe { (CStr::from_ptr(dir).to_string_lossy().into_owned(), CStr::from_ptr(file).to_string_lossy().into_owned()) };
    let text = match d.strip_prefix(VIRTUAL_IBDEV_ROOT).and_then(|r| r.strip_prefix('/')).and_then(|n| virtual_file(n.trim_end_matches('/'), &f)) {
        Some(Ok(t)) => t.into_bytes(),
        Some(Err(e)) => {
            set_errno(e);
            return -1;
        }
        None => match std::fs::read(format!("{d}/{f}")) {
            Ok(b) => b,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                return -1;
            }
        },
    };
    // As rdma-core: at most size-1 bytes, a trailing newline dropped, NUL
    // terminated; the length is returned.
    let mut t: &[u8] = &text;
    if t.last() == Some(&b'\n') {
        t = &t[..t.len() - 1];
    }
    let n = t.len().min(size - 1);
    // SAFETY: buf has size bytes; n + 1 <= size.
    unsafe {
        std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    n as c_int
}}

/// `ibv_wc_status` names.
const WC_STATUS: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM rendezvous request error",
];

fn pick(table: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

export! {"IBVERBS_1.1" fn ibv_wc_status_str(status: c_int) -> *const c_char, fail = c"unknown".as_ptr(), {
    pick(&WC_STATUS, status)
}}

export! {"IBVERBS_1.1" fn ibv_node_type_str(node_type: c_int) -> *const c_char, fail = c"unknown".as_ptr(), {
    const T: [&CStr; 8] = [
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    pick(&T, node_type)
}}

export! {"IBVERBS_1.1" fn ibv_port_state_str(port_state: c_int) -> *const c_char, fail = c"unknown".as_ptr(), {
    const T: [&CStr; 6] = [c"PORT_NOP", c"PORT_DOWN", c"PORT_INIT", c"PORT_ARMED", c"PORT_ACTIVE", c"PORT_ACTIVE_DEFER"];
    pick(&T, port_state)
}}

export! {"IBVERBS_1.1" fn ibv_event_type_str(event: c_int) -> *const c_char, fail = c"unknown".as_ptr(), {
    const T: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(&T, event)
}}

/// `enum ibv_rate` -> (multiple of 2.5 Gb/s if it is one, Mb/s).
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, -1, 28125),
    (20, -1, 53125),
    (21, -1, 425000),
    (22, -1, 637500),
    (23, -1, 850000),
    (24, -1, 1275000),
];

export! {"IBVERBS_1.0" fn ibv_rate_to_mult(rate: c_int) -> c_int, fail = -1, {
    RATES.iter().find(|r| r.0 == rate).map(|r| r.1).unwrap_or(-1)
}}

export! {"IBVERBS_1.0" fn mult_to_ibv_rate(mult: c_int) -> c_int, fail = 0, {
    // 0 is IBV_RATE_MAX.
    RATES.iter().find(|r| r.1 == mult && mult > 0).map(|r| r.0).unwrap_or(0)
}}

export! {"IBVERBS_1.1" fn ibv_rate_to_mbps(rate: c_int) -> c_int, fail = -1, {
    RATES.iter().find(|r| r.0 == rate).map(|r| r.2).unwrap_or(-1)
}}

export! {"IBVERBS_1.1" fn mbps_to_ibv_rate(mbps: c_int) -> c_int, fail = 0, {
    RATES.iter().find(|r| r.2 == mbps).map(|r| r.0).unwrap_or(0)
}}

export! {"IBVERBS_1.1" fn ibv_fork_init() -> c_int, fail = 0, {
    // Nothing is pinned: the device is in the process, fork needs nothing.
    0
}}

export! {"IBVERBS_1.13" fn ibv_is_fork_initialized() -> u32, fail = IBV_FORK_UNNEEDED, {
    IBV_FORK_UNNEEDED
}}

export! {"IBVERBS_1.1" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int, fail = 0, {
    let _ = (base, size);
    0
}}

export! {"IBVERBS_1.1" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int, fail = 0, {
    let _ = (base, size);
    0
}}

fn ah_from_kern(s: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: s.grh.dgid,
            flow_label: s.grh.flow_label,
            sgid_index: s.grh.sgid_index,
            hop_limit: s.grh.hop_limit,
            traffic_class: s.grh.traffic_class,
        },
        dlid: s.dlid,
        sl: s.sl,
        src_path_bits: s.src_path_bits,
        static_rate: s.static_rate,
        is_global: s.is_global,
        port_num: s.port_num,
    }
}

export! {"IBVERBS_1.1" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const ib_uverbs_ah_attr) -> (), fail = (), {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's structs.
    unsafe { dst.write(ah_from_kern(&*src)) };
}}

export! {"IBVERBS_1.0" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const ib_uverbs_qp_attr) -> (), fail = (), {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's structs.
    let s = unsafe { &*src };
    let d = ibv_qp_attr {
        qp_state: s.qp_state,
        cur_qp_state: s.cur_qp_state,
        path_mtu: s.path_mtu,
        path_mig_state: s.path_mig_state,
        qkey: s.qkey,
        rq_psn: s.rq_psn,
        sq_psn: s.sq_psn,
        dest_qp_num: s.dest_qp_num,
        qp_access_flags: s.qp_access_flags as c_int,
        cap: ibv_qp_cap {
            max_send_wr: s.max_send_wr,
            max_recv_wr: s.max_recv_wr,
            max_send_sge: s.max_send_sge,
            max_recv_sge: s.max_recv_sge,
            max_inline_data: s.max_inline_data,
        },
        ah_attr: ah_from_kern(&s.ah_attr),
        alt_ah_attr: ah_from_kern(&s.alt_ah_attr),
        pkey_index: s.pkey_index,
        alt_pkey_index: s.alt_pkey_index,
        en_sqd_async_notify: s.en_sqd_async_notify,
        sq_draining: s.sq_draining,
        max_rd_atomic: s.max_rd_atomic,
        max_dest_rd_atomic: s.max_dest_rd_atomic,
        min_rnr_timer: s.min_rnr_timer,
        port_num: s.port_num,
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        alt_port_num: s.alt_port_num,
        alt_timeout: s.alt_timeout,
        rate_limit: 0,
    };
    // SAFETY: the caller's out struct.
    unsafe { dst.write(d) };
}}

export! {"IBVERBS_1.0" fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *const ib_user_path_rec) -> (), fail = (), {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's structs.
    let s = unsafe { &*src };
    let d = ibv_sa_path_rec {
        dgid: s.dgid,
        sgid: s.sgid,
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as i32,
        flow_label: s.flow_label,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        reversible: s.reversible as i32,
        numb_path: s.numb_path,
        pkey: s.pkey,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        mtu: s.mtu as u8,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: the caller's out struct.
    unsafe { dst.write(d) };
}}

export! {"IBVERBS_1.0" fn ibv_copy_path_rec_to_kern(dst: *mut ib_user_path_rec, src: *const ibv_sa_path_rec) -> (), fail = (), {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's structs.
    let s = unsafe { &*src };
    let d = ib_user_path_rec {
        dgid: s.dgid,
        sgid: s.sgid,
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as u32,
        flow_label: s.flow_label,
        reversible: s.reversible as u32,
        mtu: s.mtu.into(),
        pkey: s.pkey,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        numb_path: s.numb_path,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: the caller's out struct.
    unsafe { dst.write(d) };
}}

export! {"IBVERBS_1.1" fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> c_int, fail = libc::EIO, {
    // Routing and neighbours are the kernel's UDP stack's business.
    let _ = (context, attr, eth_mac, vid);
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.10" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context, fail = std::ptr::null_mut(), {
    // Objects of another process's context: there is no kernel to share.
    let _ = cmd_fd;
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}}

export! {"IBVERBS_1.10" fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd, fail = std::ptr::null_mut(), {
    let _ = (context, pd_handle);
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}}

export! {"IBVERBS_1.10" fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    let _ = (pd, mr_handle);
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}}

export! {"IBVERBS_1.13" fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut c_void, fail = std::ptr::null_mut(), {
    let _ = (context, dm_handle);
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}}

export! {"IBVERBS_1.10" fn ibv_unimport_pd(pd: *mut ibv_pd) -> (), fail = (), {
    let _ = pd;
}}

export! {"IBVERBS_1.10" fn ibv_unimport_mr(mr: *mut ibv_mr) -> (), fail = (), {
    let _ = mr;
}}

export! {"IBVERBS_1.13" fn ibv_unimport_dm(dm: *mut c_void) -> (), fail = (), {
    let _ = dm;
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_rates() {
        // SAFETY: static C strings.
        let s = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string();
        // SAFETY: calling our own exports with plain values.
        unsafe {
            assert_eq!(s(ibv_wc_status_str(0)), "success");
            assert_eq!(s(ibv_wc_status_str(12)), "transport retry counter exceeded");
            assert_eq!(s(ibv_wc_status_str(99)), "unknown");
            assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
            assert_eq!(s(ibv_port_state_str(4)), "PORT_ACTIVE");
            assert_eq!(s(ibv_event_type_str(4)), "communication established");
            assert_eq!(ibv_rate_to_mult(3), 4);
            assert_eq!(mult_to_ibv_rate(4), 3);
            assert_eq!(ibv_rate_to_mbps(16), 103125);
            assert_eq!(mbps_to_ibv_rate(2500), 2);
            assert_eq!(ibv_rate_to_mult(0), -1);
            assert_eq!(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
        }
    }

    #[test]
    fn kernel_ah_attrs_copy_field_by_field() {
        let mut k = ib_uverbs_ah_attr::default();
        k.grh.dgid = [3; 16];
        k.grh.hop_limit = 9;
        k.is_global = 1;
        k.port_num = 1;
        k.sl = 2;
        let mut d = ibv_ah_attr::default();
        // SAFETY: valid structs.
        unsafe { ibv_copy_ah_attr_from_kern(&mut d, &k) };
        assert_eq!(
            (d.grh.dgid, d.grh.hop_limit, d.is_global, d.port_num, d.sl),
            ([3; 16], 9, 1, 1, 2)
        );
    }

    #[test]
    fn sysfs_reads_truncate_and_terminate() {
        let dir = std::env::temp_dir().join(format!("rxe-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), "hello\n").unwrap();
        let d = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let mut buf = [0 as c_char; 4];
        // SAFETY: valid strings and a 4-byte buffer.
        let n = unsafe { ibv_read_sysfs_file(d.as_ptr(), c"f".as_ptr(), buf.as_mut_ptr(), 4) };
        assert_eq!(n, 3);
        // SAFETY: NUL-terminated by the call.
        assert_eq!(
            unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
            "hel"
        );
        let mut big = [0 as c_char; 16];
        // SAFETY: as above.
        let n = unsafe { ibv_read_sysfs_file(d.as_ptr(), c"f".as_ptr(), big.as_mut_ptr(), 16) };
        assert_eq!(n, 5, "newline dropped");
        // SAFETY: as above.
        assert_eq!(
            unsafe { ibv_read_sysfs_file(d.as_ptr(), c"missing".as_ptr(), big.as_mut_ptr(), 16) },
            -1
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
