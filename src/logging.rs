//! Routes kcsi's `tracing` events to a sink the host chooses (a C callback, via the ffi layer)
//! or to stderr. The sink is process-wide because the C API's log setting is.

use std::fmt::Write as _;
use std::sync::{Arc, Once, RwLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;

/// Receives one formatted event: level (0 error .. 4 trace), target, message.
pub type Sink = Arc<dyn Fn(i32, &str, &str) + Send + Sync>;

struct Route {
    sink: Option<Sink>,
    max_level: i32,
}

static ROUTE: RwLock<Route> = RwLock::new(Route {
    sink: None,
    max_level: 1,
});
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

/// Installs kcsi's subscriber once; before a host sets a sink, warnings and errors go to
/// stderr (or up to `KCSI_LOG_LEVEL`, 0..4).
pub fn init() {
    INSTALL.call_once(|| {
        if let Some(level) = std::env::var("KCSI_LOG_LEVEL")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
        {
            route_write().max_level = level.clamp(0, 4);
        }
        let subscriber = Registry::default().with(Router);
        // Fails only if another subscriber is global in this binary (e.g. a Rust test harness
        // that set its own); events then go there instead.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

fn route_write() -> std::sync::RwLockWriteGuard<'static, Route> {
    ROUTE.write().unwrap_or_else(|p| p.into_inner())
}

/// Sends events at or below `max_level` to `sink`, or to stderr when `sink` is `None`.
pub fn set_sink(sink: Option<Sink>, max_level: i32) {
    init();
    let mut route = route_write();
    route.sink = sink;
    route.max_level = max_level.clamp(0, 4);
}

struct Router;

#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let text = format!("{value:?}");
            self.0.insert_str(0, &text);
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for Router {
    // The level can change at any time, so no callsite's interest may be cached.
    fn register_callsite(&self, _: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        let route = ROUTE.read().unwrap_or_else(|p| p.into_inner());
        level_number(meta.level()) <= route.max_level
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut msg = Message::default();
        event.record(&mut msg);
        let level = level_number(event.metadata().level());
        let target = event.metadata().target();
        // Clone the sink out so a slow callback never holds the lock.
        let sink = {
            let route = ROUTE.read().unwrap_or_else(|p| p.into_inner());
            if level > route.max_level {
                return;
            }
            route.sink.clone()
        };
        match sink {
            Some(sink) => sink(level, target, &msg.0),
            None => eprintln!("kcsi {} {target}: {}", event.metadata().level(), msg.0),
        }
    }
}
