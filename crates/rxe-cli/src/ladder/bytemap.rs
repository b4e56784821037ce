//! The byte map of one frame, as the page draws it: each region (every
//! header the dissector names, the payload, the pad, the ICRC) with its
//! offset and length, each header's fields from the same field tables that
//! drive `rxe dissect -v` (`Describe`/`FieldSpec`), and the ICRC verdict
//! with the bytes it covers and the ones it masks.
//!
//! To keep a 10 000-packet page small, the field tables are stored once per
//! header kind (`Schemas`) and the page reads field values from the frame
//! bytes itself; only words the tables compute (an opcode name, a
//! syndrome) travel per frame. Long payloads are cut: the head of the frame
//! through 64 payload bytes and the tail (pad and CRCs) are embedded, the
//! middle is shown as elided.

use std::collections::HashMap;
use std::fmt::Write as _;

use rxe_core::wire::dissect::Dissection;
use rxe_core::wire::icrc::{IcrcScope, ICRC_LEN};
use serde_json::{json, Map, Value};

/// Payload bytes embedded after the last header.
const PAYLOAD_SHOWN: usize = 64;
/// Frames up to this size are embedded whole.
const WHOLE: usize = 320;

/// Field tables, one per header kind, shared by all frames.
#[derive(Default)]
pub struct Schemas {
    list: Vec<Value>,
    ix: HashMap<&'static str, usize>,
}

impl Schemas {
    pub fn into_json(self) -> Value {
        Value::Array(self.list)
    }

    fn id(
        &mut self,
        key: &'static str,
        name: &str,
        fields: &[rxe_core::wire::FieldValue],
    ) -> usize {
        if let Some(&i) = self.ix.get(key) {
            return i;
        }
        let f: Vec<Value> = fields
            .iter()
            .map(|f| {
                json!([
                    f.spec.name,
                    f.spec.bit_offset,
                    f.spec.bits,
                    f.spec.doc,
                    f.spec.is_reserved()
                ])
            })
            .collect();
        self.list.push(json!({"name": name, "fields": f}));
        self.ix.insert(key, self.list.len() - 1);
        self.list.len() - 1
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn offset_in(d: &Dissection<'_>, sub: &[u8]) -> usize {
    (sub.as_ptr() as usize).wrapping_sub(d.data.as_ptr() as usize)
}

/// Bytes the ICRC replaces with ones before computing (IBTA 7.8.1; RoCEv2
/// Annex A17.3.3): (frame offset, bit mask, why).
fn icrc_masks(d: &Dissection<'_>) -> (usize, Vec<(usize, u8, &'static str)>, &'static str) {
    let mut m = Vec::new();
    let t = offset_in(d, d.frame.transport);
    let start;
    let note;
    match d.frame.icrc_scope() {
        IcrcScope::RoceV2 {
            ip_header,
            udp_header,
        } => {
            let ip = offset_in(d, ip_header);
            start = ip;
            if ip_header[0] >> 4 == 4 {
                m.push((ip + 1, 0xff, "IPv4 TOS (DSCP/ECN): routers may change it"));
                m.push((ip + 8, 0xff, "IPv4 TTL: decremented per hop"));
                m.push((ip + 10, 0xff, "IPv4 header checksum: changes with TTL"));
                m.push((ip + 11, 0xff, "IPv4 header checksum: changes with TTL"));
            } else {
                m.push((ip, 0x0f, "IPv6 traffic class: routers may change it"));
                m.push((ip + 1, 0xff, "IPv6 traffic class and flow label"));
                m.push((ip + 2, 0xff, "IPv6 flow label"));
                m.push((ip + 3, 0xff, "IPv6 flow label"));
                m.push((ip + 7, 0xff, "IPv6 hop limit: decremented per hop"));
            }
            let u = offset_in(d, udp_header);
            m.push((u + 6, 0xff, "UDP checksum"));
            m.push((u + 7, 0xff, "UDP checksum"));
            note = "RoCEv2: 8 bytes of 0xFF stand in for the LRH (not on the wire), then the IP header, UDP header, BTH through the pad, with the variant fields set to ones";
        }
        IcrcScope::Grh { grh } => {
            let g = offset_in(d, grh);
            start = g;
            m.push((g, 0x0f, "GRH traffic class"));
            m.push((g + 1, 0xff, "GRH traffic class and flow label"));
            m.push((g + 2, 0xff, "GRH flow label"));
            m.push((g + 3, 0xff, "GRH flow label"));
            m.push((g + 7, 0xff, "GRH hop limit"));
            note = "8 bytes of 0xFF stand in for the LRH, then the GRH, BTH through the pad, with the variant fields set to ones";
        }
        IcrcScope::IbLocal { lrh } => {
            let l = offset_in(d, lrh);
            start = l;
            m.push((l, 0xf0, "LRH VL: switches may change it"));
            note = "local IB packet: the LRH (VL set to ones), BTH through the pad";
        }
    }
    m.push((
        t + 4,
        0xff,
        "BTH FECN, BECN and resv6: switches may set the ECN bits",
    ));
    (start, m, note)
}

/// The byte map of a frame.
pub fn bytemap(d: &Dissection<'_>, schemas: &mut Schemas) -> Value {
    let data = d.data;
    let mut regions = Vec::new();
    let mut header_end = 0;
    for l in d.layers() {
        let sid = schemas.id(l.key, l.name, &l.fields);
        let mut meanings = Map::new();
        for (i, f) in l.fields.iter().enumerate() {
            if let Some(m) = &f.meaning {
                meanings.insert(i.to_string(), Value::from(m.clone()));
            }
        }
        header_end = header_end.max(l.offset + l.bytes.len());
        regions.push(json!([l.name, l.offset, l.bytes.len(), sid, meanings]));
    }
    let t = d.frame.transport;
    let t_at = offset_in(d, t);
    let t_end = t_at + t.len();
    let icrc_at = t_end.saturating_sub(ICRC_LEN);
    match &d.packet {
        Ok(p) => {
            let pay_at = t_at + p.header_len;
            if !p.payload.is_empty() {
                regions.push(json!(["Payload", pay_at, p.payload.len(), -1, {}]));
            }
            let pad = usize::from(p.repr.bth.pad_count);
            if pad > 0 {
                regions.push(json!(["Pad", pay_at + p.payload.len(), pad, -1, {}]));
            }
        }
        Err(e) => {
            if icrc_at > header_end {
                regions.push(json!([
                    format!("Unparsed ({e})"),
                    header_end,
                    icrc_at - header_end,
                    -1,
                    {}
                ]));
            }
        }
    }
    let mut icrc = Value::Null;
    if let Some(carried) = d.carried_icrc() {
        regions.push(json!(["ICRC", icrc_at, ICRC_LEN, -1, {}]));
        let (from, masks, note) = icrc_masks(d);
        icrc = json!({
            "verdict": match d.icrc { Ok(()) => "verified".to_string(), Err(e) => format!("BAD: {e}") },
            "carried": format!("{carried:#010x}"),
            "from": from,
            "to": icrc_at,
            "masks": masks.iter().map(|&(o, m, w)| json!([o, m, w])).collect::<Vec<_>>(),
            "note": note,
        });
    }
    if let (Some(ib), Some(res)) = (d.frame.ib_packet, d.vcrc) {
        let at = offset_in(d, ib) + ib.len() - 2;
        regions.push(json!(["VCRC", at, 2, -1, {}]));
        icrc["vcrc"] = Value::from(match res {
            Ok(()) => "verified".to_string(),
            Err(e) => format!("BAD: {e}"),
        });
    }
    let shown = if data.len() <= WHOLE {
        data.len()
    } else {
        let pay_at = d
            .packet
            .as_ref()
            .map_or(header_end, |p| t_at + p.header_len);
        (pay_at + PAYLOAD_SHOWN).min(data.len())
    };
    let tail_at = icrc_at
        .saturating_sub(
            d.packet
                .as_ref()
                .map_or(0, |p| usize::from(p.repr.bth.pad_count)),
        )
        .max(shown);
    json!({
        "len": data.len(),
        "head": hex(&data[..shown]),
        "tail_at": tail_at,
        "tail": hex(&data[tail_at..]),
        "regions": regions,
        "icrc": icrc,
        "summary": d.summary(),
    })
}
