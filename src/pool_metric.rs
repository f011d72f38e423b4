//! The warm pool's scaling signal: every pool controller says, once per period, whether it is
//! idle (warm, waiting for a claim), as a CloudWatch embedded-metric-format line on stderr.
//! The awslogs driver ships stderr to CloudWatch Logs, which turns each such line into
//! high-resolution datapoints of `IdleWarmTasks` and `WarmTasks` (dimension `Pool`): their
//! sums per period are the pool's idle and live task counts, which the template's scaling
//! alarms follow, so the pool grows before claims have to wait in the queue.
//!
//! Each line is written half a period past a wall-clock multiple of the period, so every period
//! CloudWatch aggregates holds exactly one sample per live task (a line written at the boundary
//! could land in either period).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::PoolMetric;
use crate::shutdown::Shutdown;

/// A pool controller's state as the metric reports it.
#[derive(Debug, Clone, Default)]
pub struct Idle(Arc<AtomicBool>);

impl Idle {
    /// Warm and waiting for a claim (`true`), or serving / going away (`false`).
    pub fn set(&self, idle: bool) {
        self.0.store(idle, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A warm controller's state, idle, reported every period while `tasks` run (when there is a
/// metric to report).
pub fn start(metric: Option<PoolMetric>, tasks: &Shutdown) -> Idle {
    let idle = Idle::default();
    if let Some(metric) = metric {
        idle.set(true);
        tasks.spawn(report(metric, idle.clone(), tasks.token().clone()));
    }
    idle
}

/// Writes `metric`'s line to stderr every period, with `idle`'s state, until `stop` fires.
async fn report(metric: PoolMetric, idle: Idle, stop: CancellationToken) {
    loop {
        let wait = until_next(wallcrawler_contract::time::unix_millis(), metric.period);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
        let line = line(
            &metric,
            idle.get(),
            wallcrawler_contract::time::unix_millis(),
        );
        // One write of one whole line: lines from the log writer cannot split it.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// How long from `now_ms` until half a period past the next multiple of `period`.
fn until_next(now_ms: u64, period: Duration) -> Duration {
    let period_ms = period.as_millis().max(1) as u64;
    let offset = period_ms / 2;
    let into = (now_ms + period_ms - offset) % period_ms;
    Duration::from_millis(period_ms - into)
}

/// One embedded-metric-format line (`\n`-terminated).
fn line(metric: &PoolMetric, idle: bool, now_ms: u64) -> String {
    let resolution = if metric.period < Duration::from_secs(60) {
        1
    } else {
        60
    };
    let definition =
        |name: &str| json!({"Name": name, "Unit": "Count", "StorageResolution": resolution});
    let doc = json!({
        "_aws": {
            "Timestamp": now_ms,
            "CloudWatchMetrics": [{
                "Namespace": metric.namespace,
                "Dimensions": [["Pool"]],
                "Metrics": [definition("IdleWarmTasks"), definition("WarmTasks")],
            }],
        },
        "Pool": metric.pool,
        "IdleWarmTasks": u8::from(idle),
        "WarmTasks": 1,
    });
    format!("{doc}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn metric(period: u64) -> PoolMetric {
        PoolMetric {
            namespace: "Wallcrawler".into(),
            pool: "wc".into(),
            period: Duration::from_secs(period),
        }
    }

    #[test]
    fn lines_are_written_mid_period() {
        let ten = Duration::from_secs(10);
        assert_eq!(until_next(1_000_000, ten), Duration::from_millis(5_000));
        assert_eq!(until_next(1_004_999, ten), Duration::from_millis(1));
        assert_eq!(until_next(1_005_000, ten), Duration::from_millis(10_000));
        assert_eq!(until_next(1_009_000, ten), Duration::from_millis(6_000));
        let one = Duration::from_secs(1);
        assert_eq!(until_next(7_250, one), Duration::from_millis(250));
        // Whatever the start, the line lands half a period past a boundary.
        for now in [0, 1, 4_999, 5_001, 123_456_789] {
            assert_eq!(
                (now + until_next(now, ten).as_millis() as u64) % 10_000,
                5_000
            );
        }
    }

    #[test]
    fn a_line_is_embedded_metric_format() {
        let text = line(&metric(10), true, 1_700_000_000_123);
        assert!(text.ends_with('\n') && text.matches('\n').count() == 1);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_123u64);
        let d = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(d["Namespace"], "Wallcrawler");
        assert_eq!(d["Dimensions"], json!([["Pool"]]));
        let names: Vec<_> = d["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["Name"].as_str().unwrap(),
                    m["StorageResolution"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(names, [("IdleWarmTasks", 1), ("WarmTasks", 1)]);
        assert_eq!(
            (&v["Pool"], &v["IdleWarmTasks"], &v["WarmTasks"]),
            (&json!("wc"), &json!(1), &json!(1))
        );
        let busy: Value = serde_json::from_str(&line(&metric(60), false, 1)).unwrap();
        assert_eq!(busy["IdleWarmTasks"], 0);
        assert_eq!(
            busy["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["StorageResolution"],
            60
        );
    }
}
