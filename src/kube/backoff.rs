//! apimachinery's `wait.ExponentialBackoff` with the node info manager's constants, and
//! `utilerrors.NewAggregate`'s message format for the errors collected on the way.

use std::time::Duration;

use crate::error::Error;

use super::client::ApiError;

/// `wait.Backoff`: at most `steps` tries; the pause starts at `duration` and grows by `factor`,
/// each pause stretched by up to `jitter` of itself.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub steps: u32,
    pub duration: Duration,
    pub factor: f64,
    pub jitter: f64,
}

/// Upstream `updateBackoff` (Node and CSINode writes).
pub const UPDATE: Backoff = Backoff {
    steps: 4,
    duration: Duration::from_millis(10),
    factor: 5.0,
    jitter: 0.1,
};

/// Upstream `initBackoff` (CSINode initialisation at start-up), about 140 s in total.
pub const INIT: Backoff = Backoff {
    steps: 6,
    duration: Duration::from_millis(30),
    factor: 8.0,
    jitter: 0.1,
};

/// Tries in total when they keep failing with 409 Conflict. Upstream gives conflicts the same 4
/// tries as any error; kcsi also sends its Node PATCH with a resourceVersion (so that a
/// concurrent writer is detected instead of overwritten), which makes conflicts more frequent
/// on a busy Node, so they get more tries, with pauses capped at `CONFLICT_PAUSE_CAP`.
const CONFLICT_STEPS: u32 = 16;
const CONFLICT_PAUSE_CAP: Duration = Duration::from_millis(250);

/// apimachinery's `ErrWaitTimeout` text, which upstream's messages embed.
pub const WAIT_TIMEOUT: &str = "timed out waiting for the condition";

impl Backoff {
    /// Runs `attempt` until it succeeds or the tries run out; returns every error seen.
    pub async fn retry<T, F, Fut>(&self, mut attempt: F) -> Result<T, Vec<ApiError>>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        let mut errors = Vec::new();
        let mut pause = self.duration;
        let mut other_failures = 0;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let conflict = e.is_conflict();
                    errors.push(e);
                    if !conflict {
                        other_failures += 1;
                    }
                    if other_failures >= self.steps
                        || errors.len() as u32 >= CONFLICT_STEPS.max(self.steps)
                    {
                        return Err(errors);
                    }
                }
            }
            let this_pause = if errors.last().is_some_and(ApiError::is_conflict) {
                pause.min(CONFLICT_PAUSE_CAP)
            } else {
                pause
            };
            tokio::time::sleep(self.jittered(this_pause)).await;
            pause = pause.mul_f64(self.factor);
        }
    }

    /// The pause after the `n`th failed try (0-based), jitter included.
    pub fn pause(&self, n: u32) -> Duration {
        self.jittered(self.duration.mul_f64(self.factor.powi(n as i32)))
    }

    fn jittered(&self, d: Duration) -> Duration {
        if self.jitter <= 0.0 {
            return d;
        }
        d + d.mul_f64(self.jitter * fastrand::f64())
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as is; several deduplicated in
/// `[a, b]`.
pub fn aggregate(errors: &[ApiError]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.error.message()) {
            seen.push(e.error.message());
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Upstream's `fmt.Errorf("<what>: %v; caused by: %v", wait.ErrWaitTimeout, aggregate)`, with
/// the kind and class of the last failure (so an unreachable API server stays `Unavailable`).
pub fn exhausted(what: &str, errors: Vec<ApiError>) -> Error {
    let message = format!("{what}: {WAIT_TIMEOUT}; caused by: {}", aggregate(&errors));
    match errors.into_iter().last() {
        Some(last) => last.error.with_message(message),
        None => Error::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn err(m: &str) -> ApiError {
        ApiError {
            error: Error::new(ErrorKind::Kubernetes, m),
            code: None,
        }
    }

    #[test]
    fn aggregate_deduplicates_and_brackets_like_utilerrors() {
        assert_eq!(aggregate(&[err("a")]), "a");
        assert_eq!(aggregate(&[err("a"), err("a")]), "a");
        assert_eq!(aggregate(&[err("a"), err("b"), err("a")]), "[a, b]");
    }

    #[tokio::test]
    async fn retry_gives_up_after_the_steps() {
        let mut tries = 0;
        let r: Result<(), _> = UPDATE
            .retry(|| {
                tries += 1;
                async { Err(err("boom")) }
            })
            .await;
        assert_eq!(r.unwrap_err().len(), 4);
        assert_eq!(tries, 4);
    }
}
