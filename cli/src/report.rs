//! Steps as they run and the summary: human lines on stdout, or with `--json` exactly one JSON
//! object `{"ok", "steps": [{"name", "ok", "durationMs", "grpcCode", "class", "error"}]}`.

use std::time::Duration;

use kcsi::{Error, ErrorClass};
use serde_json::{json, Value};

use crate::fault_proxy::Event;
use crate::wire::code_name;

/// One RPC seen during a step.
#[derive(Clone, Debug)]
pub struct Rpc {
    pub method: String,
    pub code: Option<i32>,
    pub elapsed: Duration,
}

#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    pub ok: bool,
    pub skipped: bool,
    pub duration: Duration,
    pub grpc_code: Option<i32>,
    pub class: Option<ErrorClass>,
    pub error: Option<String>,
    pub rpcs: Vec<Rpc>,
}

pub fn class_name(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::Final => "final",
        ErrorClass::Uncertain => "uncertain",
        ErrorClass::Transient => "transient",
    }
}

pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

pub struct Report {
    pub json: bool,
    pub steps: Vec<Step>,
}

impl Report {
    pub fn new(json: bool) -> Report {
        Report {
            json,
            steps: Vec::new(),
        }
    }

    pub fn ok(&self) -> bool {
        self.steps.iter().all(|s| s.ok)
    }

    /// A line for humans (nothing in `--json` mode).
    pub fn say(&self, line: impl AsRef<str>) {
        if !self.json {
            println!("{}", line.as_ref());
        }
    }

    pub fn begin(&self, name: &str) {
        self.say(format!("[{name}]"));
    }

    /// Prints one proxy event under the running step, and returns the RPC it completes.
    pub fn event(&self, e: &Event) -> Option<Rpc> {
        match e {
            Event::Request { method, text } => {
                self.say(format!("  -> {method} {text}"));
                None
            }
            Event::Response {
                method,
                code,
                message,
                text,
                elapsed,
            } => {
                let status = match code {
                    Some(0) => "OK".to_string(),
                    Some(c) => format!("{} \"{message}\"", code_name(*c)),
                    None => format!("no answer ({message})"),
                };
                self.say(format!(
                    "  <- {method} {status} in {:.1} ms {text}",
                    ms(*elapsed)
                ));
                Some(Rpc {
                    method: method.clone(),
                    code: *code,
                    elapsed: *elapsed,
                })
            }
            Event::Fault { method, what } => {
                self.say(format!(
                    "  !! fault proxy{}: {what}",
                    if method.is_empty() {
                        String::new()
                    } else {
                        format!(" ({method})")
                    }
                ));
                None
            }
        }
    }

    pub fn finish(&mut self, mut step: Step, note: Option<String>) {
        if let Some(note) = note {
            self.say(format!("  {note}"));
        }
        if step.grpc_code.is_none() && step.ok {
            step.grpc_code = step.rpcs.last().and_then(|r| r.code);
        }
        let verdict = match (step.ok, step.skipped) {
            (true, true) => "SKIP",
            (true, false) => "PASS",
            (false, _) => "FAIL",
        };
        let mut line = format!("  {verdict} {} in {:.1} ms", step.name, ms(step.duration));
        if !step.ok {
            if let Some(c) = step.grpc_code {
                line += &format!(", gRPC {}", code_name(c));
            }
            if let Some(c) = step.class {
                line += &format!(", class {}", class_name(c));
            }
            if let Some(e) = &step.error {
                line += &format!(": {e}");
            }
        }
        self.say(line);
        self.steps.push(step);
    }

    pub fn failed(name: &str, duration: Duration, err: &Error, rpcs: Vec<Rpc>) -> Step {
        Step {
            name: name.to_string(),
            ok: false,
            skipped: false,
            duration,
            grpc_code: err.grpc_code(),
            class: Some(err.class()),
            error: Some(err.message().to_string()),
            rpcs,
        }
    }

    pub fn to_json(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "ok": s.ok,
                    "skipped": s.skipped,
                    "durationMs": ms(s.duration),
                    "grpcCode": s.grpc_code,
                    "class": s.class.map(class_name),
                    "error": s.error,
                    "rpcs": s.rpcs.iter().map(|r| json!({
                        "method": r.method,
                        "grpcCode": r.code,
                        "durationMs": ms(r.elapsed),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({"ok": self.ok(), "steps": steps})
    }

    /// The summary table, or the one JSON object.
    pub fn summary(&self) {
        if self.json {
            println!("{}", self.to_json());
            return;
        }
        let passed = self.steps.iter().filter(|s| s.ok).count();
        let total: Duration = self.steps.iter().map(|s| s.duration).sum();
        println!();
        println!(
            "summary: {} ({passed}/{} steps passed, {:.1} ms)",
            if self.ok() { "PASS" } else { "FAIL" },
            self.steps.len(),
            ms(total)
        );
        for s in &self.steps {
            let verdict = match (s.ok, s.skipped) {
                (true, true) => "skip",
                (true, false) => "pass",
                (false, _) => "FAIL",
            };
            let rpcs: Vec<&str> = s.rpcs.iter().map(|r| r.method.as_str()).collect();
            let mut line = format!(
                "  {:<22} {verdict} {:>9.1} ms  {}",
                s.name,
                ms(s.duration),
                rpcs.join(" ")
            );
            if let Some(c) = s.class {
                line += &format!(
                    "  [{}{}]",
                    class_name(c),
                    s.grpc_code
                        .map(|c| format!(", {}", code_name(c)))
                        .unwrap_or_default()
                );
            }
            println!("{line}");
        }
    }
}
