//! Field tables for the non-IBA layers around a RoCE packet (Ethernet,
//! 802.1Q, Linux cooked capture, IPv4, IPv6, UDP), so that `rxe dissect -v`
//! explains every byte of a frame the same way. Parsing of these layers is
//! etherparse's job (see `frame`); these types only describe.

use core::net::{Ipv4Addr, Ipv6Addr};

use super::error::Layer;
use super::field::{Describe, FieldSpec};

/// Says which ICRC treatment a field gets (RoCEv2 Annex A17.3.3).
const MASKED: &str = "masked to ones in the ICRC";

fn ethertype_name(t: u128) -> Option<String> {
    Some(
        match t {
            0x0800 => "IPv4",
            0x86dd => "IPv6",
            0x8915 => "RoCEv1 (GRH follows)",
            0x8100 => "802.1Q VLAN tag follows",
            0x88a8 => "802.1ad (QinQ) tag follows",
            0x0806 => "ARP",
            _ => return None,
        }
        .to_string(),
    )
}

fn mac(raw: u128) -> String {
    let b = (raw as u64).to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// Ethernet II header (14 bytes; VLAN tags are described by `VlanFields`).
pub struct EthernetFields;
impl Describe for EthernetFields {
    const LAYER: Layer = Layer::Ethernet;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("Destination", "dst", 0, 48, "destination MAC address"),
        FieldSpec::new("Source", "src", 48, 48, "source MAC address"),
        FieldSpec::new("EtherType", "ethertype", 96, 16, "protocol that follows"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "dst" | "src" => Some(mac(raw)),
            "ethertype" => ethertype_name(raw),
            _ => None,
        }
    }
}

/// The 4 bytes after an 802.1Q/802.1ad EtherType: tag control and the next
/// EtherType.
pub struct VlanFields;
impl Describe for VlanFields {
    const LAYER: Layer = Layer::Ethernet;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "PCP",
            "pcp",
            0,
            3,
            "priority code point (RoCE traffic class for PFC)",
        ),
        FieldSpec::new("DEI", "dei", 3, 1, "drop eligible"),
        FieldSpec::new("VID", "vid", 4, 12, "VLAN identifier"),
        FieldSpec::new("EtherType", "ethertype", 16, 16, "protocol that follows"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        (key == "ethertype").then(|| ethertype_name(raw)).flatten()
    }
}

/// Linux cooked capture v1 (16 bytes).
pub struct LinuxSllFields;
impl Describe for LinuxSllFields {
    const LAYER: Layer = Layer::LinuxSll;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "Packet type",
            "packet_type",
            0,
            16,
            "0 to us, 1 broadcast, 2 multicast, 3 other host, 4 sent by us",
        ),
        FieldSpec::new("ARPHRD type", "arphrd", 16, 16, "link-layer device type"),
        FieldSpec::new(
            "Address length",
            "addr_len",
            32,
            16,
            "bytes of link-layer address",
        ),
        FieldSpec::new("Address", "addr", 48, 64, "link-layer source address"),
        FieldSpec::new("Protocol", "protocol", 112, 16, "EtherType that follows"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        (key == "protocol").then(|| ethertype_name(raw)).flatten()
    }
}

/// Linux cooked capture v2 (20 bytes).
pub struct LinuxSll2Fields;
impl Describe for LinuxSll2Fields {
    const LAYER: Layer = Layer::LinuxSll2;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("Protocol", "protocol", 0, 16, "EtherType that follows"),
        FieldSpec::new("Reserved", "reserved", 16, 16, "reserved"),
        FieldSpec::new("Interface index", "ifindex", 32, 32, "capturing interface"),
        FieldSpec::new("ARPHRD type", "arphrd", 64, 16, "link-layer device type"),
        FieldSpec::new(
            "Packet type",
            "packet_type",
            80,
            8,
            "0 to us, 4 sent by us, ...",
        ),
        FieldSpec::new(
            "Address length",
            "addr_len",
            88,
            8,
            "bytes of link-layer address",
        ),
        FieldSpec::new("Address", "addr", 96, 64, "link-layer source address"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        (key == "protocol").then(|| ethertype_name(raw)).flatten()
    }
}

/// IPv4 header without options (20 bytes).
pub struct Ipv4Fields;
impl Describe for Ipv4Fields {
    const LAYER: Layer = Layer::Ipv4;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("Version", "version", 0, 4, "IP version, 4"),
        FieldSpec::new("IHL", "ihl", 4, 4, "header length in 4-byte words"),
        FieldSpec::new("DSCP", "dscp", 8, 6, "differentiated services code point"),
        FieldSpec::new("ECN", "ecn", 14, 2, "explicit congestion notification"),
        FieldSpec::new(
            "Total Length",
            "total_length",
            16,
            16,
            "bytes of IP header and payload",
        ),
        FieldSpec::new(
            "Identification",
            "identification",
            32,
            16,
            "fragment identification",
        ),
        FieldSpec::new(
            "Flags",
            "flags",
            48,
            3,
            "reserved, don't fragment, more fragments",
        ),
        FieldSpec::new(
            "Fragment Offset",
            "fragment_offset",
            51,
            13,
            "offset of this fragment",
        ),
        FieldSpec::new("TTL", "ttl", 64, 8, "time to live"),
        FieldSpec::new("Protocol", "protocol", 72, 8, "17 = UDP"),
        FieldSpec::new(
            "Header Checksum",
            "checksum",
            80,
            16,
            "checksum of the IP header",
        ),
        FieldSpec::new("Source", "src", 96, 32, "source address"),
        FieldSpec::new("Destination", "dst", 128, 32, "destination address"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "dscp" => Some(format!("part of TOS, {MASKED}")),
            "ecn" => Some(format!("{}; part of TOS, {MASKED}", ecn_name(raw as u8))),
            "ttl" | "checksum" => Some(MASKED.into()),
            "identification" => Some("covered by the ICRC".into()),
            "flags" => Some(
                if raw & 0b010 != 0 {
                    "don't fragment"
                } else {
                    "may fragment"
                }
                .into(),
            ),
            "protocol" if raw == 17 => Some("UDP".into()),
            "src" | "dst" => Some(Ipv4Addr::from(raw as u32).to_string()),
            _ => None,
        }
    }
}

/// IPv6 header (40 bytes).
pub struct Ipv6Fields;
impl Describe for Ipv6Fields {
    const LAYER: Layer = Layer::Ipv6;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("Version", "version", 0, 4, "IP version, 6"),
        FieldSpec::new("Traffic Class", "traffic_class", 4, 8, "DSCP and ECN"),
        FieldSpec::new("Flow Label", "flow_label", 12, 20, "flow label"),
        FieldSpec::new(
            "Payload Length",
            "payload_length",
            32,
            16,
            "bytes after this header",
        ),
        FieldSpec::new("Next Header", "next_header", 48, 8, "17 = UDP"),
        FieldSpec::new("Hop Limit", "hop_limit", 56, 8, "hop limit"),
        FieldSpec::new("Source", "src", 64, 128, "source address"),
        FieldSpec::new("Destination", "dst", 192, 128, "destination address"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "traffic_class" => Some(format!(
                "DSCP {}, ECN {}; {MASKED}",
                raw >> 2,
                ecn_name(raw as u8)
            )),
            "flow_label" | "hop_limit" => Some(MASKED.into()),
            "next_header" if raw == 17 => Some("UDP".into()),
            "src" | "dst" => Some(Ipv6Addr::from(raw).to_string()),
            _ => None,
        }
    }
}

/// UDP header (8 bytes).
pub struct UdpFields;
impl Describe for UdpFields {
    const LAYER: Layer = Layer::Udp;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "Source Port",
            "src_port",
            0,
            16,
            "entropy for ECMP; any value",
        ),
        FieldSpec::new("Destination Port", "dst_port", 16, 16, "4791 = RoCEv2"),
        FieldSpec::new(
            "Length",
            "length",
            32,
            16,
            "bytes of UDP header and payload",
        ),
        FieldSpec::new("Checksum", "checksum", 48, 16, "0 = not computed"),
    ];
    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "dst_port" if raw == 4791 => Some("RoCEv2".into()),
            "checksum" => Some(format!(
                "{}; {MASKED}",
                if raw == 0 { "not computed" } else { "computed" }
            )),
            _ => None,
        }
    }
}

/// The ECN codepoint's name (RFC 3168 section 5); RoCEv2 congestion
/// control answers CE with a CNP.
fn ecn_name(ecn: u8) -> &'static str {
    match ecn & 0b11 {
        0b00 => "Not-ECT",
        0b01 => "ECT(1)",
        0b10 => "ECT(0), ECN-capable",
        _ => "CE, congestion experienced",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::field::assert_table_contiguous;

    #[test]
    fn tables_are_contiguous() {
        for t in [
            EthernetFields::FIELDS,
            VlanFields::FIELDS,
            LinuxSllFields::FIELDS,
            LinuxSll2Fields::FIELDS,
            Ipv4Fields::FIELDS,
            Ipv6Fields::FIELDS,
            UdpFields::FIELDS,
        ] {
            assert_table_contiguous(t);
        }
        assert_eq!(EthernetFields::header_len(), 14);
        assert_eq!(LinuxSllFields::header_len(), 16);
        assert_eq!(LinuxSll2Fields::header_len(), 20);
        assert_eq!(Ipv4Fields::header_len(), 20);
        assert_eq!(Ipv6Fields::header_len(), 40);
        assert_eq!(UdpFields::header_len(), 8);
    }

    #[test]
    fn ipv4_addresses_in_words() {
        let mut h = [0u8; 20];
        h[12..16].copy_from_slice(&[10, 99, 0, 3]);
        let f = Ipv4Fields::describe(&h).unwrap();
        let src = f.iter().find(|v| v.spec.key == "src").unwrap();
        assert_eq!(src.meaning.as_deref(), Some("10.99.0.3"));
    }
}
