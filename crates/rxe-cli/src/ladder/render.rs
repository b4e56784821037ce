//! The page: the model and the byte maps as JSON inside one HTML file with
//! its CSS and script inline. Nothing is fetched: a Content-Security-Policy
//! forbids every network source, and no URL is written into the file.

use serde_json::{json, Value};

use super::model::Model;
use super::Loaded;

const HTML: &str = include_str!("page.html");
const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The model as the page reads it.
pub fn model_json(name: &str, m: &Model, loaded: Loaded) -> Value {
    let pkts: Vec<Value> = m
        .arrows
        .iter()
        .zip(loaded.maps)
        .map(|(a, map)| {
            json!({
                "f": a.frame,
                "t": a.time,
                "s": a.from,
                "d": a.to,
                "c": a.conn,
                "k": a.kind.key(),
                "l": a.label,
                "m": a.marks.iter().map(|x| json!([x.kind.key(), x.text, x.kind.is_trouble()])).collect::<Vec<_>>(),
                "cv": a.cover.as_ref().map(|c| json!([c.psns.0, c.psns.1, c.frames])),
                "r": a.related,
                "b": map,
            })
        })
        .collect();
    let s = &m.summary;
    json!({
        "file": name,
        "other": loaded.other,
        "lanes": m.lanes.iter().map(|l| json!([l.addr, l.qpn])).collect::<Vec<_>>(),
        "conns": m.conns.iter().map(|c| json!([c.a, c.b, c.transport])).collect::<Vec<_>>(),
        "schemas": loaded.schemas.into_json(),
        "summary": {
            "packets": s.packets,
            "bad": s.bad,
            "messages": s.messages,
            "bytes": s.bytes,
            "retransmissions": s.retransmissions,
            "duplicates": s.duplicates,
            "naks": s.naks,
            "cm": s.cm,
            "rtt": s.rtt.iter().map(|r| json!({"conn": r.conn, "from": r.requester, "to": r.responder, "samples": r.samples, "min": r.min, "median": r.median, "max": r.max})).collect::<Vec<_>>(),
        },
        "pkts": pkts,
    })
}

/// JSON safe inside a `<script>` element: `<`, `>` and `&` only occur in
/// strings, where their escapes mean the same.
fn script_safe(v: &Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn html_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole page.
pub fn page(name: &str, m: &Model, loaded: Loaded) -> String {
    let model = model_json(name, m, loaded);
    HTML.replace("{{TITLE}}", &html_text(name))
        .replace("{{CSS}}", CSS)
        .replace("{{JS}}", JS)
        .replacen("{{MODEL}}", &script_safe(&model), 1)
}
