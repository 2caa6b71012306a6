//! Routes kcsi's `tracing` events to a sink the host chooses (a C callback, via the ffi layer)
//! or to stderr, in klog's text format (or klog's JSON with `KCSI_LOG_FORMAT=json`), as a
//! kubelet prints. The sink is process-wide because the C API's log setting is.
//!
//! Only kcsi's own records are routed: the libraries under it (h2, hyper, tower, tonic,
//! rustls, kube) stay silent unless `KCSI_LOG_LIBRARIES=1` asks for them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Once, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;

/// Receives one formatted record: level (0 error .. 4 trace), target, message (the text and
/// its fields as klog writes them: `msg key="value" n=1`).
pub type Sink = Arc<dyn Fn(i32, &str, &str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);
/// The highest level routed; read on every event, so an atomic, not behind the lock.
static MAX_LEVEL: AtomicI32 = AtomicI32::new(1);
static INSTALL: Once = Once::new();

pub fn level_number(level: &Level) -> i32 {
    match *level {
        Level::ERROR => 0,
        Level::WARN => 1,
        Level::INFO => 2,
        Level::DEBUG => 3,
        Level::TRACE => 4,
    }
}

fn level_filter(level: i32) -> LevelFilter {
    match level {
        0 => LevelFilter::ERROR,
        1 => LevelFilter::WARN,
        2 => LevelFilter::INFO,
        3 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// Installs kcsi's subscriber once; before a host sets a sink, warnings and errors go to
/// stderr (or up to `KCSI_LOG_LEVEL`, 0..4).
pub fn init() {
    INSTALL.call_once(|| {
        if let Some(level) = std::env::var("KCSI_LOG_LEVEL")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
        {
            MAX_LEVEL.store(level.clamp(0, 4), Ordering::Relaxed);
        }
        let router = Router {
            libraries: std::env::var("KCSI_LOG_LIBRARIES").is_ok_and(|v| v == "1"),
            json: std::env::var("KCSI_LOG_FORMAT").is_ok_and(|v| v == "json"),
        };
        let subscriber = Registry::default().with(router);
        // Fails only if another subscriber is global in this binary (e.g. a Rust test harness
        // that set its own); events then go there instead.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Sends events at or below `max_level` to `sink`, or to stderr when `sink` is `None`.
/// Returns once no record is being delivered to the previous sink any more, so whatever that
/// sink refers to may be freed (a callback must therefore never wait for this call).
pub fn set_sink(sink: Option<Sink>, max_level: i32) {
    init();
    let old = {
        let mut slot = SINK.write().unwrap_or_else(|p| p.into_inner());
        MAX_LEVEL.store(max_level.clamp(0, 4), Ordering::Relaxed);
        std::mem::replace(&mut *slot, sink)
    };
    // The global level hint changed: let every callsite see it.
    tracing::callsite::rebuild_interest_cache();
    if let Some(old) = old {
        // Deliveries hold a clone taken under the lock, so none can start after the swap;
        // wait for those in flight to drop theirs.
        while Arc::strong_count(&old) > 1 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn is_kcsi(target: &str) -> bool {
    target == "kcsi" || target.starts_with("kcsi::")
}

struct Router {
    libraries: bool,
    json: bool,
}

/// One event's message and fields.
#[derive(Default)]
struct Record {
    message: String,
    fields: Vec<(&'static str, FieldValue)>,
}

enum FieldValue {
    /// A string, quoted in text (`key="v"`) and a JSON string.
    Str(String),
    /// Printed as is in text (numbers, bools, `Debug` output) and as JSON.
    Raw(String, Option<serde_json::Value>),
}

impl Visit for Record {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields
                .push((field.name(), FieldValue::Str(value.to_string())));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.raw(field, value.to_string(), Some(value.into()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.raw(field, value.to_string(), Some(value.into()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.raw(field, value.to_string(), Some(value.into()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.raw(field, format!("{value:?}"), None);
        }
    }
}

impl Record {
    fn raw(&mut self, field: &Field, text: String, json: Option<serde_json::Value>) {
        self.fields
            .push((field.name(), FieldValue::Raw(text, json)));
    }

    /// `msg key="value" n=1`: what a callback gets and what follows klog's header.
    fn text(&self) -> String {
        let mut out = self.message.clone();
        for (key, value) in &self.fields {
            match value {
                FieldValue::Str(s) => {
                    let _ = write!(out, " {key}={s:?}");
                }
                FieldValue::Raw(s, _) => {
                    let _ = write!(out, " {key}={s}");
                }
            }
        }
        out
    }

    /// klog's JSON line (`k8s.io/component-base/logs/json`): ts in seconds, caller, msg, v,
    /// then the fields; errors and warnings also say so.
    fn json(&self, level: &Level, caller: &str, now: SystemTime) -> String {
        let ts = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let (v, severity) = match *level {
            Level::ERROR => (0, Some("error")),
            Level::WARN => (0, Some("warning")),
            Level::INFO => (0, None),
            Level::DEBUG => (4, None),
            Level::TRACE => (5, None),
        };
        let json = |v: &serde_json::Value| v.to_string();
        // Written by hand only to keep klog's key order; every value is serde_json's.
        let mut out = format!(
            "{{\"ts\":{},\"caller\":{},\"msg\":{},\"v\":{v}",
            json(&ts.into()),
            json(&caller.into()),
            json(&self.message.clone().into())
        );
        if let Some(severity) = severity {
            let _ = write!(out, ",\"level\":\"{severity}\"");
        }
        for (key, value) in &self.fields {
            let value = match value {
                FieldValue::Str(s) => json(&s.clone().into()),
                FieldValue::Raw(_, Some(v)) => json(v),
                FieldValue::Raw(s, None) => json(&s.clone().into()),
            };
            let _ = write!(out, ",{}:{value}", json(&(*key).into()));
        }
        out.push('}');
        out
    }
}

/// `mounter.rs:120`, as klog's header names the file (base name) and line.
fn caller(meta: &Metadata<'_>) -> String {
    let file = meta.file().unwrap_or("?");
    let base = file.rsplit('/').next().unwrap_or(file);
    format!("{base}:{}", meta.line().unwrap_or(0))
}

/// klog's text header: `I1201 07:00:00.000000    1234 mounter.rs:120] `, in local time.
fn klog_header(level: &Level, caller: &str, now: SystemTime) -> String {
    let letter = match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    };
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as libc::time_t;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // localtime_r only writes `tm`; on failure the zeroed fields print as a visible 0000.
    unsafe { libc::localtime_r(&secs, &mut tm) };
    format!(
        "{letter}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {}] ",
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        since.subsec_micros(),
        std::process::id(),
        caller
    )
}

impl<S: Subscriber> Layer<S> for Router {
    // Library callsites are off for good unless asked for; kcsi's may change level at any
    // time, so their interest is never cached.
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.libraries || is_kcsi(meta.target()) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        level_number(meta.level()) <= MAX_LEVEL.load(Ordering::Relaxed)
            && (self.libraries || is_kcsi(meta.target()))
    }

    // Lets `tracing` skip disabled events before calling in here at all.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(level_filter(MAX_LEVEL.load(Ordering::Relaxed)))
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let level = level_number(meta.level());
        if level > MAX_LEVEL.load(Ordering::Relaxed) {
            return;
        }
        let mut record = Record::default();
        event.record(&mut record);
        // Clone the sink out so a slow callback never holds the lock.
        let sink = SINK.read().unwrap_or_else(|p| p.into_inner()).clone();
        match sink {
            Some(sink) => sink(level, meta.target(), &record.text()),
            None => {
                let now = SystemTime::now();
                let line = if self.json {
                    record.json(meta.level(), &caller(meta), now)
                } else {
                    klog_header(meta.level(), &caller(meta), now) + &record.text()
                };
                eprintln!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            message: "kubernetes.io/csi: Mounter.SetUpAt(/x)".into(),
            fields: vec![
                ("driver", FieldValue::Str("d.example".into())),
                ("attempt", FieldValue::Raw("2".into(), Some(2.into()))),
                ("duration", FieldValue::Raw("1.5ms".into(), None)),
            ],
        }
    }

    #[test]
    fn text_is_klog_message_then_key_value_pairs() {
        assert_eq!(
            record().text(),
            r#"kubernetes.io/csi: Mounter.SetUpAt(/x) driver="d.example" attempt=2 duration=1.5ms"#
        );
    }

    #[test]
    fn klog_header_has_letter_date_time_pid_and_caller() {
        let now = UNIX_EPOCH + Duration::from_micros(1_764_572_400_123_456);
        let header = klog_header(&Level::WARN, "mounter.rs:120", now);
        let pid = std::process::id().to_string();
        // W + MMDD + space + HH:MM:SS.micro, pid right-aligned in 7, then caller.
        assert_eq!(
            header.len(),
            "W1201 07:00:00.123456 ".len() + 8 + "mounter.rs:120] ".len()
        );
        assert!(header.starts_with('W'), "{header}");
        assert!(
            header[5..].starts_with(' ') && header[14..].starts_with(".123456 "),
            "{header}"
        );
        assert!(
            header.ends_with(&format!("{pid:>7} mounter.rs:120] ")),
            "{header}"
        );
        assert!(klog_header(&Level::DEBUG, "a.rs:1", now).starts_with('I'));
        assert!(klog_header(&Level::ERROR, "a.rs:1", now).starts_with('E'));
    }

    #[test]
    fn json_line_keeps_klogs_key_order() {
        let now = UNIX_EPOCH + Duration::from_secs(1);
        let line = record().json(&Level::INFO, "a.rs:1", now);
        assert!(
            line.starts_with(r#"{"ts":1.0,"caller":"a.rs:1","msg":"#),
            "{line}"
        );
        assert!(
            line.ends_with(r#""driver":"d.example","attempt":2,"duration":"1.5ms"}"#),
            "{line}"
        );
    }

    #[test]
    fn json_line_carries_ts_caller_msg_v_and_fields() {
        let now = UNIX_EPOCH + Duration::from_secs(1_764_572_400);
        let line: serde_json::Value =
            serde_json::from_str(&record().json(&Level::DEBUG, "mounter.rs:120", now)).unwrap();
        assert_eq!(line["ts"], 1_764_572_400.0);
        assert_eq!(line["caller"], "mounter.rs:120");
        assert_eq!(line["msg"], "kubernetes.io/csi: Mounter.SetUpAt(/x)");
        assert_eq!(line["v"], 4);
        assert_eq!(line["driver"], "d.example");
        assert_eq!(line["attempt"], 2);
        assert_eq!(line["duration"], "1.5ms");
        let warning: serde_json::Value =
            serde_json::from_str(&record().json(&Level::WARN, "a.rs:1", now)).unwrap();
        assert_eq!(
            (warning["v"].clone(), warning["level"].clone()),
            (0.into(), "warning".into())
        );
    }

    #[test]
    fn only_kcsi_targets_are_kcsi() {
        assert!(is_kcsi("kcsi") && is_kcsi("kcsi::csi::csi_client"));
        for lib in [
            "h2::codec",
            "hyper_util",
            "tower::buffer",
            "rustls::client",
            "kube_runtime",
            "kcsix",
        ] {
            assert!(!is_kcsi(lib), "{lib}");
        }
    }
}
