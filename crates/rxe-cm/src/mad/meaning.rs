//! Words for field values, shared by the header and message tables.

use super::header::method_name;
use super::rej::RejectReason;
use super::{attribute_name, sidr::SidrStatus};

/// The IBTA's MTU codes, as the REQ's Path MTU carries them (the same
/// codes as PortInfo and path records; not checked against the text).
pub(crate) fn mtu_bytes(code: u8) -> Option<u32> {
    Some(match code {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        _ => return None,
    })
}

fn gid_text(raw: u128) -> String {
    rxe_core::Gid::from_bytes(raw.to_be_bytes()).to_string()
}

fn timeout_text(raw: u128) -> String {
    // 4.096 us x 2^value (IBTA 12.6.5, not checked against the text).
    let ns = 4096u128 << raw.min(31);
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} us", ns as f64 / 1e3)
    }
}

pub(crate) fn meaning(key: &str, raw: u128) -> Option<String> {
    let small = u8::try_from(raw).ok();
    match key {
        "method" => small.and_then(|m| method_name(m).map(str::to_owned)),
        "attribute_id" => u16::try_from(raw)
            .ok()
            .and_then(attribute_name)
            .map(str::to_owned),
        "mgmt_class" if raw == 0x07 => Some("Communication Management".into()),
        "path_mtu" => small.and_then(mtu_bytes).map(|b| format!("{b} bytes")),
        "transport_service_type" => Some(
            match raw {
                0 => "RC",
                1 => "UC",
                2 => "RD",
                _ => "extended (see Extended Transport Type)",
            }
            .into(),
        ),
        "reason" => u16::try_from(raw)
            .ok()
            .and_then(|c| RejectReason::from_code(c).name())
            .map(str::to_owned),
        "message_mraed" => Some(["REQ", "REP", "LAP", "reserved"][(raw & 3) as usize].into()),
        "message_rejected" => {
            Some(["REQ", "REP", "no message", "reserved"][(raw & 3) as usize].into())
        }
        "sidr_status" => small.map(|s| format!("{:?}", SidrStatus::from_code(s))),
        "service_id" => crate::ip_cm::describe_service_id(raw as u64),
        k if k.ends_with("_gid") => Some(gid_text(raw)),
        k if k.ends_with("cm_response_timeout")
            || k.ends_with("ack_timeout")
            || k == "service_timeout"
            || k == "target_ack_delay" =>
        {
            Some(timeout_text(raw))
        }
        _ => None,
    }
}
