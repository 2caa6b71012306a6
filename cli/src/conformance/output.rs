//! What a person and a CI read: a progress line per case (with the failing call and the
//! kubelet behaviour it breaks), the summary table, `--json`, and JUnit XML.

use std::time::Duration;

use serde_json::{json, Value};

use super::facts::Facts;
use super::runner::{CaseResult, Verdict};
use crate::report::ms;

pub fn header(f: &Facts, endpoint: &str) {
    println!(
        "kcsi conformance: {} {} at {endpoint}; node ID {:?}, max volumes {}",
        f.driver, f.vendor_version, f.node_id, f.max_volumes
    );
    println!(
        "  node capabilities: {}; controller: {}",
        list(&f.node_caps()),
        if f.controller {
            list(&f.controller_caps())
        } else {
            "none".into()
        }
    );
}

fn list(items: &[&str]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

fn word(v: &Verdict) -> &'static str {
    match v {
        Verdict::Pass(_) => "pass",
        Verdict::Fail { .. } => "fail",
        Verdict::Skip(_) => "skip",
    }
}

pub fn progress(r: &CaseResult) {
    let (verdict, note) = match &r.verdict {
        Verdict::Pass(n) => ("PASS", n.as_str()),
        Verdict::Skip(why) => ("SKIP", why.as_str()),
        Verdict::Fail { what, .. } => ("FAIL", what.as_str()),
    };
    println!(
        "{verdict} {:<32} {:>8.1} ms  {note}",
        r.name,
        ms(r.duration)
    );
    if let Verdict::Fail { breaks, rpc, .. } = &r.verdict {
        if let Some(x) = rpc {
            println!("       request: {} {}", x.method, x.request);
            println!("       answer:  {}", x.answer());
        }
        println!("       breaks:  {breaks}");
    }
    if !r.cleaned.is_empty() {
        println!(
            "       clean-up unmounted what was left: {}",
            r.cleaned.join(", ")
        );
    }
}

pub fn summary(results: &[CaseResult], total: Duration) {
    let count = |w: &str| results.iter().filter(|r| word(&r.verdict) == w).count();
    println!();
    println!(
        "summary: {} ({} passed, {} failed, {} skipped of {} cases, {:.1} s)",
        if ok(results) { "PASS" } else { "FAIL" },
        count("pass"),
        count("fail"),
        count("skip"),
        results.len(),
        total.as_secs_f64()
    );
    for r in results {
        let rpcs: Vec<&str> = r.exchanges.iter().map(|x| x.method.as_str()).collect();
        println!(
            "  {:<32} {}  {:>8.1} ms  {} RPCs",
            r.name,
            word(&r.verdict),
            ms(r.duration),
            rpcs.len()
        );
    }
}

pub fn ok(results: &[CaseResult]) -> bool {
    !results
        .iter()
        .any(|r| matches!(r.verdict, Verdict::Fail { .. }))
}

pub fn to_json(f: &Facts, results: &[CaseResult], total: Duration) -> Value {
    let cases: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut c = json!({
                "name": r.name,
                "checks": r.checks,
                "verdict": word(&r.verdict),
                "durationMs": ms(r.duration),
                "rpcs": r.exchanges.iter().map(|x| json!({
                    "method": x.method,
                    "grpcCode": x.code.flatten(),
                })).collect::<Vec<_>>(),
                "cleanedUp": r.cleaned,
            });
            match &r.verdict {
                Verdict::Pass(note) => c["note"] = json!(note),
                Verdict::Skip(why) => c["reason"] = json!(why),
                Verdict::Fail { what, breaks, rpc } => {
                    c["failure"] = json!({
                        "what": what,
                        "breaks": breaks,
                        "method": rpc.as_ref().map(|x| &x.method),
                        "request": rpc.as_ref().map(|x| &x.request),
                        "answer": rpc.as_ref().map(|x| x.answer()),
                    })
                }
            }
            c
        })
        .collect();
    json!({
        "ok": ok(results),
        "driver": f.driver,
        "vendorVersion": f.vendor_version,
        "nodeId": f.node_id,
        "durationMs": ms(total),
        "cases": cases,
    })
}

/// JUnit XML, one testsuite of the driver, one testcase per case.
pub fn junit(f: &Facts, results: &[CaseResult], total: Duration) -> String {
    let count = |w: &str| results.iter().filter(|r| word(&r.verdict) == w).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    x += &format!(
        "<testsuites name=\"kcsi conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">\n",
        results.len(),
        count("fail"),
        count("skip"),
        total.as_secs_f64()
    );
    x +=
        &format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">\n",
        escape(&format!("kcsi conformance: {} {}", f.driver, f.vendor_version)),
        results.len(),
        count("fail"),
        count("skip"),
        total.as_secs_f64()
    );
    for r in results {
        let group = r.name.split('.').next().unwrap_or(r.name);
        x += &format!(
            "    <testcase classname=\"kcsi.conformance.{}\" name=\"{}\" time=\"{:.3}\">\n",
            escape(group),
            escape(r.name),
            r.duration.as_secs_f64()
        );
        match &r.verdict {
            Verdict::Pass(note) => {
                x += &format!("      <system-out>{}</system-out>\n", escape(note));
            }
            Verdict::Skip(why) => {
                x += &format!("      <skipped message=\"{}\"/>\n", escape(why));
            }
            Verdict::Fail { what, breaks, rpc } => {
                let mut body = format!("checks: {}\n", r.checks);
                if let Some(c) = rpc {
                    body += &format!(
                        "request: {} {}\nanswer: {}\n",
                        c.method,
                        c.request,
                        c.answer()
                    );
                }
                body += &format!("breaks: {breaks}");
                x += &format!(
                    "      <failure message=\"{}\">{}</failure>\n",
                    escape(what),
                    escape(&body)
                );
            }
        }
        x += "    </testcase>\n";
    }
    x += "  </testsuite>\n</testsuites>\n";
    x
}

/// Text as XML character data or attribute value; characters XML 1.0 cannot hold are dropped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&apos;",
            '\n' => out += "&#10;",
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn xml_text_is_escaped_and_control_characters_dropped() {
        assert_eq!(
            escape("a<b & \"c\"\u{1}\nd"),
            "a&lt;b &amp; &quot;c&quot;&#10;d"
        );
    }
}
