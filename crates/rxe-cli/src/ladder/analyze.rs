//! The transport's story in a capture: who talks to whom (lanes: one per
//! address and QPN), and for each packet what it means in its connection
//! — which request PSNs an ACK covers, which packets are retransmissions
//! (and why: a NAK's go-back-N, an RNR wait, a timeout), duplicates,
//! READ responses and atomic ACKs tied to their requests, CM MADs, UD
//! datagrams, CNPs and bad packets. Only what is on the wire is used: a
//! capture point sees one copy of each packet and no endpoint state.

use std::collections::HashMap;

use rxe_core::wire::aeth::rnr_timer_micros;
use rxe_core::wire::dissect::syndrome_words;
use rxe_core::wire::{NakCode, Opcode, Operation, Position, Syndrome, Transport};

use super::model::*;
use super::packet::{BthKeys, Pkt, MGMT_CLASS_CM};

const PSN_MASK: u32 = (1 << 24) - 1;

/// `a - b` in 24-bit serial arithmetic (IBTA 9.7.2: PSNs wrap), in
/// -2^23 .. 2^23.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & PSN_MASK;
    if d >= 1 << 23 {
        d as i32 - (1 << 24)
    } else {
        d as i32
    }
}

fn psn_add(a: u32, n: i32) -> u32 {
    (a as i32).wrapping_add(n) as u32 & PSN_MASK
}

/// Coverage walks at most this many PSNs: more means the ACK is not for
/// the PSNs we saw (a capture that starts mid-connection).
const MAX_COVER_WALK: i32 = 1 << 16;

/// A directed connection flow as seen on the wire: (source address,
/// destination address, destination QP).
type Flow = (String, String, u32);

fn transport_of(k: &BthKeys) -> Option<Transport> {
    k.opcode().transport()
}

fn is_connected(k: &BthKeys) -> bool {
    matches!(
        transport_of(k),
        Some(Transport::Rc | Transport::Uc | Transport::Xrc | Transport::Cnp)
    )
}

fn operation(k: &BthKeys) -> Option<Operation> {
    k.opcode().info().map(|i| i.operation)
}

fn is_response(k: &BthKeys) -> bool {
    operation(k).is_some_and(|o| !o.is_request())
}

/// The BTH names only the destination QP. A connected flow's own QPN is the
/// destination QP of the flow coming back: pair each flow with the reverse
/// flow whose responses (ACKs, READ responses, atomic ACKs) carry the PSNs
/// of its requests; flows with no responses (UC, a capture of one side)
/// pair when they are the only ones between two addresses.
fn pair_flows(pkts: &[Pkt]) -> HashMap<Flow, u32> {
    let mut last_req: HashMap<(String, String, u32), u32> = HashMap::new();
    let mut votes: HashMap<(Flow, Flow), usize> = HashMap::new();
    let mut order: Vec<Flow> = Vec::new();
    for p in pkts {
        let Some(k) = &p.bth else { continue };
        if !is_connected(k) {
            continue;
        }
        let flow = (p.src.clone(), p.dst.clone(), k.dest_qp);
        if !order.contains(&flow) {
            order.push(flow.clone());
        }
        if is_response(k) {
            if let Some(&x) = last_req.get(&(p.dst.clone(), p.src.clone(), k.psn)) {
                let req = (p.dst.clone(), p.src.clone(), x);
                *votes.entry((req, flow)).or_default() += 1;
            }
        } else if operation(k).is_some() {
            last_req.insert((p.src.clone(), p.dst.clone(), k.psn), k.dest_qp);
        }
    }
    let mut ranked: Vec<_> = votes.into_iter().collect();
    // Most votes first; ties in a fixed order so the result is stable.
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut own: HashMap<Flow, u32> = HashMap::new();
    for ((req, resp), _) in ranked {
        if own.contains_key(&req) || own.contains_key(&resp) {
            continue;
        }
        own.insert(req.clone(), resp.2);
        own.insert(resp, req.2);
    }
    // Lone flows each way between two addresses belong together.
    for f in &order {
        if own.contains_key(f) {
            continue;
        }
        let same: Vec<&Flow> = order
            .iter()
            .filter(|g| g.0 == f.0 && g.1 == f.1 && !own.contains_key(*g))
            .collect();
        let back: Vec<&Flow> = order
            .iter()
            .filter(|g| g.0 == f.1 && g.1 == f.0 && !own.contains_key(*g))
            .collect();
        if same.len() == 1 && back.len() == 1 {
            let b = back[0].clone();
            own.insert(f.clone(), b.2);
            own.insert(b, f.2);
        }
    }
    own
}

/// What a requester has sent and had acknowledged on one connection.
#[derive(Default)]
struct Requester {
    first: Option<u32>,
    max: Option<u32>,
    /// PSN -> (arrow of the first copy, arrow of the latest copy).
    sent: HashMap<u32, (usize, usize)>,
    acked: Option<u32>,
    /// The arrow of the response that last acknowledged something.
    acked_by: Option<usize>,
    /// The last NAK or RNR NAK not yet answered by new requests.
    nak: Option<(usize, Syndrome, u32)>,
    /// Outstanding READ requests: (PSN, arrow).
    reads: Vec<(u32, usize)>,
    rtt: Vec<f64>,
}

struct Analyzer {
    lanes: Vec<Lane>,
    lane_ix: HashMap<Lane, usize>,
    conns: Vec<Conn>,
    conn_ix: HashMap<(usize, usize), usize>,
    arrows: Vec<Arrow>,
    reqs: HashMap<(usize, usize), Requester>,
    summary: Summary,
}

fn rnr_ms(timer: u8) -> f64 {
    rnr_timer_micros(timer) as f64 / 1000.0
}

fn ms(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1000.0)
}

impl Analyzer {
    fn lane(&mut self, addr: &str, qpn: Option<u32>) -> usize {
        let l = Lane {
            addr: addr.to_string(),
            qpn,
        };
        if let Some(&i) = self.lane_ix.get(&l) {
            return i;
        }
        self.lanes.push(l.clone());
        self.lane_ix.insert(l, self.lanes.len() - 1);
        self.lanes.len() - 1
    }

    fn conn(&mut self, x: usize, y: usize, transport: &'static str) -> usize {
        let key = (x.min(y), x.max(y));
        if let Some(&i) = self.conn_ix.get(&key) {
            return i;
        }
        self.conns.push(Conn {
            a: x,
            b: y,
            transport,
        });
        self.conn_ix.insert(key, self.conns.len() - 1);
        self.conns.len() - 1
    }

    fn mark(&mut self, i: usize, kind: MarkKind, text: String) {
        self.arrows[i].marks.push(Mark { kind, text });
    }

    fn frame_of(&self, i: usize) -> u64 {
        self.arrows[i].frame
    }

    /// Acknowledges PSNs up to `upto` on `key`, returning what is newly covered.
    fn cover(&mut self, key: (usize, usize), upto: u32, at: usize) -> Option<Cover> {
        let now = self.arrows[at].time;
        let r = self.reqs.entry(key).or_default();
        let from = match (r.acked, r.first) {
            (Some(a), _) => psn_add(a, 1),
            (None, Some(f)) => f,
            (None, None) => return None,
        };
        let n = psn_diff(upto, from) + 1;
        if n <= 0 || n > MAX_COVER_WALK {
            return None;
        }
        r.acked = Some(upto);
        r.acked_by = Some(at);
        let mut idx = Vec::new();
        for i in 0..n {
            if let Some(&(first, latest)) = r.sent.get(&psn_add(from, i)) {
                idx.push(latest);
                // Karn's rule: a retransmitted PSN gives no RTT sample.
                if i == n - 1 && first == latest {
                    r.rtt.push(now - self.arrows[first].time);
                }
            }
        }
        if idx.is_empty() {
            return None;
        }
        idx.sort_unstable();
        Some(Cover {
            psns: (from, upto),
            frames: idx.iter().map(|&i| self.arrows[i].frame).collect(),
        })
    }

    fn request(&mut self, i: usize, k: &BthKeys, key: (usize, usize), t: Transport) {
        let info = k.opcode().info();
        let op = info.map(|x| x.operation);
        let now = self.arrows[i].time;
        let r = self.reqs.entry(key).or_default();
        r.first.get_or_insert(k.psn);
        let mut fresh = true;
        let mut marks = Vec::new();
        let mut related = None;
        match r.max {
            Some(m) if psn_diff(k.psn, m) <= 0 => {
                fresh = false;
                let before = r.sent.get(&k.psn).copied();
                let acked = r.acked.is_some_and(|a| psn_diff(k.psn, a) <= 0);
                let same = before.is_some_and(|(_, latest)| {
                    self.arrows[latest].label == self.arrows[i].label
                        && now - self.arrows[latest].time < 100e-6
                });
                if let Some((first, _)) = before {
                    related = Some(first);
                }
                let why = match r.nak {
                    Some((n, Syndrome::RnrNak { timer }, _)) => {
                        let waited = now - self.arrows[n].time;
                        related = Some(n);
                        format!(
                            "resent after the RNR NAK in frame {} (waited {}; the NAK asked for {:.3} ms; IBTA 9.7.5.2.8)",
                            self.arrows[n].frame,
                            ms(waited),
                            rnr_ms(timer)
                        )
                    }
                    Some((n, _, from)) => {
                        related = Some(n);
                        format!(
                            "go-back-N: the NAK in frame {} asked to resend from PSN {from} (IBTA 9.7.5.2)",
                            self.arrows[n].frame
                        )
                    }
                    None if acked && r.acked_by.is_some() => {
                        let by = r.acked_by.unwrap_or(i);
                        format!(
                            "resent {} after frame {} acknowledged it: the requester did not act on that ACK (lost after the capture point, or dropped by the requester) and its timer ran out (IBTA 9.7.5.1.1)",
                            ms(now - self.arrows[by].time),
                            self.arrows[by].frame
                        )
                    }
                    None => match before {
                        Some((first, latest)) => format!(
                            "timeout: PSN {} first sent in frame {}, no ACK for {} (IBTA 9.7.5.1.1)",
                            k.psn,
                            self.arrows[first].frame,
                            ms(now - self.arrows[latest].time)
                        ),
                        None => format!("PSN {} is behind the highest PSN sent", k.psn),
                    },
                };
                if same && r.nak.is_none() {
                    marks.push((
                        MarkKind::Duplicate,
                        format!(
                            "duplicate: identical copy of frame {} {} later",
                            self.arrows[before.map_or(i, |b| b.1)].frame,
                            ms(now - self.arrows[before.map_or(i, |b| b.1)].time)
                        ),
                    ));
                } else {
                    if acked {
                        marks.push((
                            MarkKind::Duplicate,
                            format!(
                                "duplicate: PSN {} was already acknowledged; the responder acknowledges it again without executing it again (IBTA 9.7.5.1.1)",
                                k.psn
                            ),
                        ));
                    }
                    marks.push((MarkKind::Retransmit, why));
                }
                if let Some(e) = r.sent.get_mut(&k.psn) {
                    e.1 = i;
                } else {
                    r.sent.insert(k.psn, (i, i));
                }
            }
            m => {
                if let Some(m) = m {
                    let gap = psn_diff(k.psn, m) - 1;
                    // A READ request takes one PSN per response packet
                    // (IBTA 9.7.2): PSNs after it may be its responses'.
                    let after_read = r.reads.last().is_some_and(|&(p, _)| p == m);
                    if gap > 0 && !after_read {
                        marks.push((
                            MarkKind::Gap,
                            format!(
                                "PSNs {}..{} ({gap} packets) are not in the capture{}",
                                psn_add(m, 1),
                                psn_add(k.psn, -1),
                                if t == Transport::Uc {
                                    ": on UC the responder drops the rest of that message"
                                } else {
                                    ""
                                }
                            ),
                        ));
                    }
                }
                r.max = Some(k.psn);
                r.nak = None;
                r.sent.insert(k.psn, (i, i));
            }
        }
        if op == Some(Operation::RdmaReadRequest) {
            r.reads.retain(|&(p, _)| p != k.psn);
            r.reads.push((k.psn, i));
            if r.reads.len() > 64 {
                r.reads.remove(0);
            }
        }
        if fresh {
            let ends = info.is_some_and(|x| {
                matches!(
                    x.position,
                    None | Some(Position::Last) | Some(Position::Only)
                )
            });
            if ends {
                self.summary.messages += 1;
            }
            self.summary.bytes += k.payload_len as u64;
        }
        for (kind, text) in marks {
            self.mark(i, kind, text);
        }
        // `related` is an arrow index until here; the model names frames.
        if let Some(rel) = related {
            self.arrows[i].related = Some(self.frame_of(rel));
        }
        if self.arrows[i].has(MarkKind::Retransmit) {
            self.summary.retransmissions += 1;
        }
        if self.arrows[i].has(MarkKind::Duplicate) {
            self.summary.duplicates += 1;
        }
    }

    fn response(&mut self, i: usize, k: &BthKeys, key: (usize, usize)) {
        let op = operation(k);
        let pos = k.opcode().info().and_then(|x| x.position);
        match op {
            Some(Operation::RdmaReadResponse) => {
                self.arrows[i].kind = Kind::ReadResponse;
                let r = self.reqs.entry(key).or_default();
                // The response PSNs run on from the request's PSN.
                let req = r
                    .reads
                    .iter()
                    .rev()
                    .find(|&&(p, _)| (0..MAX_COVER_WALK).contains(&psn_diff(k.psn, p)))
                    .copied();
                if r.max.is_none_or(|m| psn_diff(k.psn, m) > 0) {
                    r.max = Some(k.psn);
                }
                if let Some((p, at)) = req {
                    self.arrows[i].related = Some(self.frame_of(at));
                    if matches!(pos, Some(Position::First | Position::Only)) {
                        let t = self.arrows[i].time - self.arrows[at].time;
                        let r = self.reqs.entry(key).or_default();
                        if r.sent.get(&p).is_some_and(|&(f, l)| f == l) {
                            r.rtt.push(t);
                        }
                    }
                }
                if matches!(pos, Some(Position::First | Position::Only)) {
                    // A READ response acknowledges the requests before it
                    // (IBTA 9.7.5.1): cover up to the PSN before its request.
                    if let Some((p, _)) = req {
                        let before = psn_add(p, -1);
                        self.arrows[i].cover = self.cover(key, before, i);
                    }
                }
                if matches!(pos, Some(Position::Last | Position::Only)) {
                    let r = self.reqs.entry(key).or_default();
                    r.acked = Some(k.psn);
                    r.nak = None;
                    if let Some((p, _)) = req {
                        r.reads.retain(|&(q, _)| q != p);
                    }
                }
                self.summary.bytes += k.payload_len as u64;
            }
            Some(Operation::AtomicAcknowledge) => {
                self.arrows[i].kind = Kind::AtomicAck;
                if let Some(&(first, _)) = self.reqs.entry(key).or_default().sent.get(&k.psn) {
                    self.arrows[i].related = Some(self.frame_of(first));
                }
                self.arrows[i].cover = self.cover(key, k.psn, i);
                self.reqs.entry(key).or_default().nak = None;
            }
            _ => self.ack(i, k, key),
        }
    }

    fn ack(&mut self, i: usize, k: &BthKeys, key: (usize, usize)) {
        let Some((syn, msn)) = k.aeth else { return };
        match syn {
            Syndrome::Ack { .. } => {
                self.arrows[i].kind = Kind::Ack;
                let c = self.cover(key, k.psn, i);
                if c.is_none() {
                    self.mark(
                        i,
                        MarkKind::RepeatAck,
                        format!("acknowledges nothing new: PSN {} was covered before (the answer to a duplicate request)", k.psn),
                    );
                }
                self.arrows[i].cover = c;
                // A NAK's go-back-N is over once everything sent is acknowledged.
                let r = self.reqs.entry(key).or_default();
                if r.max.is_some_and(|m| psn_diff(k.psn, m) >= 0) {
                    r.nak = None;
                }
            }
            Syndrome::RnrNak { timer } => {
                self.arrows[i].kind = Kind::RnrNak;
                // An RNR NAK acknowledges what came before its PSN (IBTA 9.7.5.2.8).
                self.arrows[i].cover = self.cover(key, psn_add(k.psn, -1), i);
                let text = format!(
                    "RNR NAK: no receive WQE for PSN {} (MSN {msn}); retry after {:.3} ms (timer code {timer}; IBTA 9.7.5.2.8)",
                    k.psn,
                    rnr_ms(timer)
                );
                self.mark(i, MarkKind::Rnr, text);
                *self.summary.naks.entry("RNR NAK".into()).or_default() += 1;
                self.reqs.entry(key).or_default().nak = Some((i, syn, k.psn));
            }
            Syndrome::Nak(code) => {
                self.arrows[i].kind = Kind::Nak;
                self.arrows[i].cover = self.cover(key, psn_add(k.psn, -1), i);
                let text = match code {
                    NakCode::PsnSequenceError => format!(
                        "PSN sequence error: the responder expected PSN {}; the requester goes back to it (IBTA 9.7.5.2)",
                        k.psn
                    ),
                    _ => format!(
                        "{}: the request with PSN {} failed; the QP goes to the error state (IBTA 9.7.5.2)",
                        syndrome_words(syn),
                        k.psn
                    ),
                };
                self.mark(i, MarkKind::Nak, text);
                *self.summary.naks.entry(syndrome_words(syn)).or_default() += 1;
                self.reqs.entry(key).or_default().nak = Some((i, syn, k.psn));
            }
            Syndrome::Reserved(_) => {
                self.arrows[i].kind = Kind::Nak;
                self.mark(i, MarkKind::Error, syndrome_words(syn));
            }
        }
    }
}

fn label(k: &BthKeys) -> String {
    let op = Opcode(k.opcode);
    let mut s = match op.info() {
        Some(i) if i.transport == Transport::Cnp => "CNP".to_string(),
        // An Acknowledge is named by its syndrome (ACK, NAK, RNR NAK).
        Some(i) if i.operation == Operation::Acknowledge => match k.aeth {
            Some((syn, _)) => format!(
                "{} {} psn={}",
                i.transport.name(),
                syndrome_words(syn),
                k.psn
            ),
            None => format!("{} {} psn={}", i.transport.name(), i.name, k.psn),
        },
        Some(i) => format!("{} {} psn={}", i.transport.name(), i.name, k.psn),
        None => format!("{op} psn={}", k.psn),
    };
    if let Some((syn, msn)) = k.aeth {
        if k.opcode()
            .info()
            .is_some_and(|i| i.operation == Operation::Acknowledge)
        {
            s = format!("{s} msn={msn}");
        } else {
            s = format!("{s} {} msn={msn}", syndrome_words(syn));
        }
    }
    if let Some(q) = k.src_qp {
        if let Some((class, attr)) = k.mad {
            if class == MGMT_CLASS_CM {
                let name = rxe_cm::mad::attribute_name(attr).unwrap_or("attribute");
                return format!("CM {name} ({attr:#06x}) psn={}", k.psn);
            }
            return format!("MAD class {class:#04x} attr {attr:#06x}");
        }
        s = format!("{s} src_qp={q:#x}");
    }
    if let Some(l) = k.dma_len {
        s = format!("{s} len={l}");
    }
    s
}

/// Builds the model of a capture from its packets in capture order.
pub fn analyze(pkts: &[Pkt]) -> Model {
    let own = pair_flows(pkts);
    let mut a = Analyzer {
        lanes: Vec::new(),
        lane_ix: HashMap::new(),
        conns: Vec::new(),
        conn_ix: HashMap::new(),
        arrows: Vec::with_capacity(pkts.len()),
        reqs: HashMap::new(),
        summary: Summary::default(),
    };
    for p in pkts {
        a.summary.packets += 1;
        let i = a.arrows.len();
        let Some(k) = &p.bth else {
            let from = a.lane(&p.src, None);
            let to = a.lane(&p.dst, None);
            a.arrows.push(Arrow {
                frame: p.frame,
                time: p.time,
                from,
                to,
                conn: None,
                kind: Kind::Bad,
                label: "MALFORMED".into(),
                marks: Vec::new(),
                cover: None,
                related: None,
            });
            a.summary.bad += 1;
            a.mark(i, MarkKind::Error, p.problem.clone().unwrap_or_default());
            continue;
        };
        let t = transport_of(k);
        let src_qpn = match t {
            Some(Transport::Ud) => k.src_qp,
            _ => own.get(&(p.src.clone(), p.dst.clone(), k.dest_qp)).copied(),
        };
        let from = a.lane(&p.src, src_qpn);
        let to = a.lane(&p.dst, Some(k.dest_qp));
        let tname = t.map_or("?", |t| t.name());
        let conn = a.conn(from, to, tname);
        let kind = match (t, k.mad) {
            (Some(Transport::Ud), Some((MGMT_CLASS_CM, _))) => Kind::Cm,
            (Some(Transport::Ud), _) => Kind::Ud,
            (Some(Transport::Cnp), _) => Kind::Cnp,
            _ => Kind::Request,
        };
        a.arrows.push(Arrow {
            frame: p.frame,
            time: p.time,
            from,
            to,
            conn: Some(conn),
            kind,
            label: label(k),
            marks: Vec::new(),
            cover: None,
            related: None,
        });
        if kind == Kind::Cm {
            a.summary.cm += 1;
        }
        if let Some(why) = &p.problem {
            a.arrows[i].kind = Kind::Bad;
            a.summary.bad += 1;
            a.mark(i, MarkKind::Error, why.clone());
            // The receiver drops a bad packet, but its sender did send that
            // PSN: a request still counts as sent (so its resending is a
            // retransmission, and the next PSN no gap).
            if let Some(tt @ (Transport::Rc | Transport::Uc | Transport::Xrc)) = t {
                if operation(k).is_some_and(|o| o.is_request()) {
                    a.request(i, k, (from, to), tt);
                }
            }
            continue;
        }
        if k.fecn || k.becn {
            let text = format!(
                "ECN: {}{} (RoCEv2 Annex A17)",
                if k.fecn {
                    "FECN (congestion on the way) "
                } else {
                    ""
                },
                if k.becn {
                    "BECN (congestion reported back)"
                } else {
                    ""
                }
            );
            a.mark(i, MarkKind::Ecn, text.trim_end().to_string());
        }
        if kind == Kind::Cnp {
            let text = "congestion notification: the receiver saw ECN marks and asks this QP's sender to slow down (RoCEv2 Annex A17.9)".to_string();
            a.mark(i, MarkKind::Ecn, text);
        }
        match t {
            Some(t @ (Transport::Rc | Transport::Uc | Transport::Xrc)) if kind == Kind::Request => {
                if is_response(k) {
                    a.response(i, k, (to, from));
                } else if operation(k).is_some() {
                    a.request(i, k, (from, to), t);
                }
            }
            Some(Transport::Ud) if kind == Kind::Ud || kind == Kind::Cm => {
                a.summary.messages += 1;
                a.summary.bytes += k.payload_len as u64;
            }
            _ => {}
        }
    }
    let mut rtt = Vec::new();
    let mut keys: Vec<_> = a.reqs.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let r = &a.reqs[&key];
        if r.rtt.is_empty() {
            continue;
        }
        let mut v = r.rtt.clone();
        v.sort_by(f64::total_cmp);
        let conn = a.conn_ix[&(key.0.min(key.1), key.0.max(key.1))];
        rtt.push(Rtt {
            conn,
            requester: key.0,
            responder: key.1,
            samples: v.len(),
            min: v[0],
            median: v[v.len() / 2],
            max: v[v.len() - 1],
        });
    }
    a.summary.rtt = rtt;
    Model {
        lanes: a.lanes,
        conns: a.conns,
        arrows: a.arrows,
        summary: a.summary,
    }
}
