//! Eviction thresholds from the four eviction maps (kubelet: pkg/kubelet/eviction/helpers.go
//! ParseThresholdConfig, parseThresholdStatement, parseGracePeriods, parseMinimumReclaims).
use std::collections::BTreeMap;
use std::time::Duration;

use super::{
    ConfigError, ConfigWarning, DEFAULT_EVICTION_HARD, ENFORCE_PODS, EvictionSource, RawMap,
    parse_go_duration,
};
use crate::policy::quantity::{QuantityOrPercent, parse_quantity, parse_quantity_or_percent};
use crate::policy::signal::{Signal, Threshold};
use crate::policy::threshold::add_allocatable_thresholds;

pub(super) struct Built {
    pub(crate) thresholds: Vec<Threshold>,
    pub(crate) warnings: Vec<ConfigWarning>,
}

const DEFAULTS_ORIGIN: &str = "kubelet defaults";

/// Where one entry came from, for errors.
struct At<'a> {
    origin: &'a str,
    key: &'a str,
}

impl At<'_> {
    fn entry_error(&self, signal: &str, value: &str, reason: impl ToString) -> ConfigError {
        ConfigError::InvalidEntry {
            origin: self.origin.to_string(),
            key: self.key.to_string(),
            name: signal.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    fn signal(&self, name: &str) -> Result<Signal, ConfigError> {
        name.parse().map_err(|_| ConfigError::UnknownSignal {
            origin: self.origin.to_string(),
            key: self.key.to_string(),
            signal: name.to_string(),
        })
    }
}

/// Parses one map into signal → value, rejecting unknown and repeated signals.
fn signal_map(raw: &RawMap) -> Result<BTreeMap<Signal, &str>, ConfigError> {
    let at = At {
        origin: &raw.origin,
        key: &raw.key,
    };
    let mut result = BTreeMap::new();
    for (name, value) in &raw.entries {
        let signal = at.signal(name)?;
        if result.insert(signal, value.as_str()).is_some() {
            return Err(ConfigError::DuplicateSignal {
                origin: raw.origin.clone(),
                key: raw.key.clone(),
                signal: name.clone(),
            });
        }
    }
    Ok(result)
}

/// A threshold value: "500Mi" or "10%". `None` for "0%" and "100%", which the kubelet
/// ignores (that is how a default threshold is switched off).
fn threshold_value(
    at: &At<'_>,
    signal: Signal,
    text: &str,
) -> Result<Option<QuantityOrPercent>, ConfigError> {
    let trimmed = text.trim();
    if trimmed.starts_with(['<', '>', '=', '!']) {
        return Err(ConfigError::BadOperator {
            origin: at.origin.to_string(),
            key: at.key.to_string(),
            signal: signal.to_string(),
            value: text.to_string(),
        });
    }
    if let Some(number) = trimmed.strip_suffix('%') {
        if trimmed == "0%" || trimmed == "100%" {
            return Ok(None);
        }
        let percent: f64 = number
            .trim()
            .parse()
            .map_err(|_| at.entry_error(signal.as_str(), text, "not a percentage"))?;
        if !percent.is_finite() || percent < 0.0 {
            return Err(at.entry_error(signal.as_str(), text, "percentage must be >= 0%"));
        }
        if percent > 100.0 {
            return Err(at.entry_error(signal.as_str(), text, "percentage must be <= 100%"));
        }
        return Ok(Some(QuantityOrPercent::Percent(percent / 100.0)));
    }
    let quantity = parse_quantity(trimmed).map_err(|e| at.entry_error(signal.as_str(), text, e))?;
    if quantity.is_negative() || quantity.is_zero() {
        return Err(at.entry_error(signal.as_str(), text, "threshold must be positive"));
    }
    Ok(Some(QuantityOrPercent::Quantity(quantity)))
}

/// A minimum reclaim: a non-negative quantity or a positive percentage.
fn min_reclaim_value(
    at: &At<'_>,
    signal: Signal,
    text: &str,
) -> Result<QuantityOrPercent, ConfigError> {
    let value =
        parse_quantity_or_percent(text).map_err(|e| at.entry_error(signal.as_str(), text, e))?;
    if let QuantityOrPercent::Percent(p) = value
        && p <= 0.0
    {
        return Err(at.entry_error(signal.as_str(), text, "percentage must be positive"));
    }
    Ok(value)
}

/// The hard map in force: the defaults when none was given, the given map otherwise, or
/// both merged (given wins) with mergeDefaultEvictionSettings.
fn hard_map(source: &EvictionSource) -> RawMap {
    let defaults = || RawMap {
        origin: DEFAULTS_ORIGIN.to_string(),
        key: "evictionHard".to_string(),
        entries: DEFAULT_EVICTION_HARD
            .iter()
            .map(|(s, v)| (s.as_str().to_string(), v.to_string()))
            .collect(),
    };
    match &source.hard {
        None => defaults(),
        Some(given) if source.merge_defaults => {
            let mut merged = given.clone();
            for (signal, value) in defaults().entries {
                if !given.entries.iter().any(|(s, _)| *s == signal) {
                    merged.entries.push((signal, value));
                }
            }
            merged
        }
        Some(given) => given.clone(),
    }
}

pub(super) fn build_thresholds(
    source: &EvictionSource,
    enforce_node_allocatable: &[String],
) -> Result<Built, ConfigError> {
    let mut warnings = Vec::new();
    let hard_raw = hard_map(source);
    let empty = RawMap::default();
    let soft_raw = source.soft.as_ref().unwrap_or(&empty);
    let grace_raw = source.soft_grace_period.as_ref().unwrap_or(&empty);
    let reclaim_raw = source.minimum_reclaim.as_ref().unwrap_or(&empty);

    let hard = signal_map(&hard_raw)?;
    let soft = signal_map(soft_raw)?;
    let grace = signal_map(grace_raw)?;
    let reclaim = signal_map(reclaim_raw)?;

    let mut thresholds = Vec::new();
    let hard_at = At {
        origin: &hard_raw.origin,
        key: &hard_raw.key,
    };
    for (signal, text) in &hard {
        if let Some(value) = threshold_value(&hard_at, *signal, text)? {
            thresholds.push(Threshold::hard(*signal, value));
        }
    }

    let grace_at = At {
        origin: &grace_raw.origin,
        key: &grace_raw.key,
    };
    let mut grace_periods: BTreeMap<Signal, Duration> = BTreeMap::new();
    for (signal, text) in &grace {
        let period =
            parse_go_duration(text).map_err(|e| grace_at.entry_error(signal.as_str(), text, e))?;
        grace_periods.insert(*signal, period);
        // kubelet: an unused grace period is ignored; we refuse it as a likely mistake.
        if !soft.contains_key(signal) {
            return Err(ConfigError::GracePeriodWithoutSoftThreshold {
                origin: grace_raw.origin.clone(),
                key: grace_raw.key.clone(),
                signal: signal.to_string(),
                value: text.to_string(),
            });
        }
    }

    let soft_at = At {
        origin: &soft_raw.origin,
        key: &soft_raw.key,
    };
    for (signal, text) in &soft {
        // kubelet: an ignored threshold (0%, 100%) is dropped before grace periods are
        // looked up, so it needs none.
        let Some(value) = threshold_value(&soft_at, *signal, text)? else {
            continue;
        };
        let Some(period) = grace_periods.get(signal) else {
            return Err(ConfigError::MissingGracePeriod {
                origin: soft_raw.origin.clone(),
                key: soft_raw.key.clone(),
                signal: signal.to_string(),
                value: text.to_string(),
            });
        };
        thresholds.push(Threshold::soft(*signal, value, *period));
    }

    let reclaim_at = At {
        origin: &reclaim_raw.origin,
        key: &reclaim_raw.key,
    };
    for (signal, text) in &reclaim {
        let value = min_reclaim_value(&reclaim_at, *signal, text)?;
        let mut used = false;
        for threshold in thresholds.iter_mut().filter(|t| t.signal == *signal) {
            threshold.min_reclaim = Some(value);
            used = true;
        }
        // kubelet: silently unused. It loads here too, with a warning.
        if !used {
            let message = if hard.contains_key(signal) || soft.contains_key(signal) {
                "minimum reclaim has no effect: the signal's threshold is 0% or 100%, which switches it off"
            } else {
                "minimum reclaim for a signal without a threshold has no effect"
            };
            warnings.push(ConfigWarning {
                origin: reclaim_raw.origin.clone(),
                key: format!("{}.{signal}", reclaim_raw.key),
                message: message.to_string(),
            });
        }
    }

    for threshold in thresholds.iter().filter(|t| {
        matches!(
            t.signal,
            Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
        )
    }) {
        let raw = if threshold.is_hard() {
            &hard_raw
        } else {
            soft_raw
        };
        warnings.push(ConfigWarning {
            origin: raw.origin.clone(),
            key: format!("{}.{}", raw.key, threshold.signal),
            message: "containerfs thresholds follow nodefs or imagefs (as in the kubelet); this one is ignored".to_string(),
        });
    }

    if enforce_node_allocatable.iter().any(|v| v == ENFORCE_PODS) {
        thresholds = add_allocatable_thresholds(&thresholds);
    }
    Ok(Built {
        thresholds,
        warnings,
    })
}
