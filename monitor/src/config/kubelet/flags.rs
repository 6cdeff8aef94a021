//! The kubelet's command-line flags for the same settings (kubelet:
//! cmd/kubelet/app/options/options.go AddKubeletConfigFlags). Flags override the file,
//! map flags replacing the whole map, as the kubelet's do. Both `--flag=value` and
//! `--flag value` are accepted. Flags the agent does not know give a warning, so a
//! kubelet's full command line can be passed.
use super::{
    ConfigError, ConfigWarning, KubeletConfig, RawMap, Scalars, format_go_duration,
    parse_feature_gates, parse_go_duration, parse_qos_reserved, parse_reservation,
    validate_enforce_node_allocatable,
};

const ORIGIN: &str = "command line";

/// Applies kubelet flags to `config`, then validates the result and rebuilds the
/// thresholds. Returns warnings for flags that are not understood.
pub fn apply_flags(
    config: &mut KubeletConfig,
    args: &[String],
) -> Result<Vec<ConfigWarning>, ConfigError> {
    let mut scalars = Scalars {
        origin: ORIGIN.to_string(),
        image_gc_high: i64::from(config.image_gc.high_threshold_percent),
        image_gc_low: i64::from(config.image_gc.low_threshold_percent),
    };
    let mut warnings = Vec::new();
    apply_flag_values(config, &mut scalars, args, &mut warnings)?;
    super::finish(config, &scalars, &mut warnings)?;
    Ok(warnings)
}

/// How a flag's value is read.
#[derive(Clone, Copy)]
enum Kind {
    /// "signal<value,signal<value" (the kubelet's LangleSeparatedMapStringString).
    LangleMap,
    /// "name=value,name=value" (MapStringString).
    EqualsMap,
    Int,
    Duration,
    Text,
}

const FLAGS: &[(&str, Kind)] = &[
    ("eviction-hard", Kind::LangleMap),
    ("eviction-soft", Kind::LangleMap),
    ("eviction-soft-grace-period", Kind::EqualsMap),
    ("eviction-minimum-reclaim", Kind::EqualsMap),
    ("eviction-max-pod-grace-period", Kind::Int),
    ("eviction-pressure-transition-period", Kind::Duration),
    ("image-gc-high-threshold", Kind::Int),
    ("image-gc-low-threshold", Kind::Int),
    ("minimum-image-ttl-duration", Kind::Duration),
    ("minimum-container-ttl-duration", Kind::Duration),
    ("maximum-dead-containers-per-container", Kind::Int),
    ("maximum-dead-containers", Kind::Int),
    ("system-reserved", Kind::EqualsMap),
    ("kube-reserved", Kind::EqualsMap),
    ("qos-reserved", Kind::EqualsMap),
    ("housekeeping-interval", Kind::Duration),
    ("max-pods", Kind::Int),
    ("pod-max-pids", Kind::Int),
    ("cgroup-root", Kind::Text),
    ("enforce-node-allocatable", Kind::Text),
    ("pod-manifest-path", Kind::Text),
    ("container-runtime-endpoint", Kind::Text),
    ("feature-gates", Kind::EqualsMap),
];

/// A parsed flag value.
enum FlagValue {
    Map(Vec<(String, String)>),
    Int(i64),
    Duration(std::time::Duration),
    Text(String),
}

fn invalid(flag: &str, value: &str, reason: impl ToString) -> ConfigError {
    ConfigError::InvalidValue {
        origin: ORIGIN.to_string(),
        key: format!("--{flag}"),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Splits "a<1,b<2" or "a=1,b=2"; an empty value is an empty map.
fn parse_map(flag: &str, text: &str, kind: Kind) -> Result<Vec<(String, String)>, ConfigError> {
    let separator = if matches!(kind, Kind::LangleMap) {
        '<'
    } else {
        '='
    };
    let mut entries = Vec::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let Some((name, value)) = item.split_once(separator) else {
            // "memory.available>1Gi" or "memory.available=1Gi" where `<` was expected.
            if matches!(kind, Kind::LangleMap)
                && let Some(at) = item.find(['>', '=', '!'])
            {
                return Err(ConfigError::BadOperator {
                    origin: ORIGIN.to_string(),
                    key: format!("--{flag}"),
                    signal: item[..at].to_string(),
                    value: item.to_string(),
                });
            }
            return Err(invalid(
                flag,
                item,
                format!("expected name{separator}value"),
            ));
        };
        let name = name.trim();
        if matches!(kind, Kind::LangleMap) && name.ends_with(['>', '=', '!']) {
            return Err(ConfigError::BadOperator {
                origin: ORIGIN.to_string(),
                key: format!("--{flag}"),
                signal: name.trim_end_matches(['>', '=', '!']).to_string(),
                value: item.to_string(),
            });
        }
        entries.push((name.to_string(), value.trim().to_string()));
    }
    Ok(entries)
}

fn parse_value(flag: &str, kind: Kind, text: &str) -> Result<FlagValue, ConfigError> {
    Ok(match kind {
        Kind::LangleMap | Kind::EqualsMap => FlagValue::Map(parse_map(flag, text, kind)?),
        Kind::Int => FlagValue::Int(
            text.trim()
                .parse()
                .map_err(|_| invalid(flag, text, "not an integer"))?,
        ),
        Kind::Duration => {
            FlagValue::Duration(parse_go_duration(text).map_err(|e| invalid(flag, text, e))?)
        }
        Kind::Text => FlagValue::Text(text.to_string()),
    })
}

pub(super) fn apply_flag_values(
    config: &mut KubeletConfig,
    scalars: &mut Scalars,
    args: &[String],
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(), ConfigError> {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(body) = arg.strip_prefix("--") else {
            warnings.push(ConfigWarning {
                origin: ORIGIN.to_string(),
                key: arg.clone(),
                message: "not a --flag, ignored".to_string(),
            });
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (body, None),
        };
        let Some((_, kind)) = FLAGS.iter().find(|(flag, _)| *flag == name) else {
            warnings.push(ConfigWarning {
                origin: ORIGIN.to_string(),
                key: format!("--{name}"),
                message: "flag not used by the agent, ignored".to_string(),
            });
            // `--unknown value`: skip the value too (the kubelet takes no positional args).
            if inline.is_none() && args.get(i).is_some_and(|next| !next.starts_with('-')) {
                i += 1;
            }
            continue;
        };
        let text = match inline {
            Some(text) => text,
            None => {
                let Some(next) = args.get(i) else {
                    return Err(invalid(name, "", "missing value"));
                };
                i += 1;
                next.clone()
            }
        };
        apply_one(
            config,
            scalars,
            name,
            parse_value(name, *kind, &text)?,
            &text,
        )?;
    }
    Ok(())
}

fn apply_one(
    config: &mut KubeletConfig,
    scalars: &mut Scalars,
    flag: &str,
    value: FlagValue,
    text: &str,
) -> Result<(), ConfigError> {
    let key = format!("--{flag}");
    let raw = |entries| {
        Some(RawMap {
            origin: ORIGIN.to_string(),
            key: key.clone(),
            entries,
        })
    };
    match (flag, value) {
        ("eviction-hard", FlagValue::Map(entries)) => config.source.hard = raw(entries),
        ("eviction-soft", FlagValue::Map(entries)) => config.source.soft = raw(entries),
        ("eviction-soft-grace-period", FlagValue::Map(entries)) => {
            config.source.soft_grace_period = raw(entries)
        }
        ("eviction-minimum-reclaim", FlagValue::Map(entries)) => {
            config.source.minimum_reclaim = raw(entries)
        }
        ("system-reserved", FlagValue::Map(entries)) => {
            config.system_reserved = parse_reservation(&entries, ORIGIN, &key)?
        }
        ("kube-reserved", FlagValue::Map(entries)) => {
            config.kube_reserved = parse_reservation(&entries, ORIGIN, &key)?
        }
        // The flag's gates are set over the file's, one by one, as the kubelet merges them.
        ("feature-gates", FlagValue::Map(entries)) => config
            .feature_gates
            .extend(parse_feature_gates(&entries, ORIGIN, &key)?),
        ("qos-reserved", FlagValue::Map(entries)) => {
            config.qos_reserved = parse_qos_reserved(&entries, ORIGIN, &key)?
        }
        ("eviction-max-pod-grace-period", FlagValue::Int(n)) => {
            // An int32 flag in the kubelet; negative values are valid (see the file key).
            let n = i32::try_from(n).map_err(|_| invalid(flag, text, "out of range"))?;
            config.eviction.max_pod_grace_period_seconds = n.into();
        }
        ("eviction-pressure-transition-period", FlagValue::Duration(d)) => {
            if !d.is_zero() {
                config.eviction.pressure_transition_period = d;
            }
        }
        ("image-gc-high-threshold", FlagValue::Int(n)) => {
            scalars.image_gc_high = n;
            scalars.origin = ORIGIN.to_string();
        }
        ("image-gc-low-threshold", FlagValue::Int(n)) => {
            scalars.image_gc_low = n;
            scalars.origin = ORIGIN.to_string();
        }
        ("minimum-image-ttl-duration", FlagValue::Duration(d)) => {
            if !d.is_zero() {
                config.image_gc.min_age = d;
            }
        }
        ("minimum-container-ttl-duration", FlagValue::Duration(d)) => {
            config.container_gc.min_age = d
        }
        ("maximum-dead-containers-per-container", FlagValue::Int(n)) => {
            config.container_gc.max_per_pod_container =
                i32::try_from(n).map_err(|_| invalid(flag, text, "out of range"))?
        }
        ("maximum-dead-containers", FlagValue::Int(n)) => {
            config.container_gc.max_containers =
                i32::try_from(n).map_err(|_| invalid(flag, text, "out of range"))?
        }
        ("housekeeping-interval", FlagValue::Duration(d)) => {
            if d.is_zero() {
                return Err(invalid(flag, &format_go_duration(d), "must be positive"));
            }
            config.housekeeping_interval = d;
        }
        ("max-pods", FlagValue::Int(n)) => {
            if n < 0 {
                return Err(invalid(flag, text, "must not be negative"));
            }
            config.max_pods = if n == 0 { 110 } else { n };
        }
        ("pod-max-pids", FlagValue::Int(n)) => config.pod_pids_limit = Some(n).filter(|n| *n >= 0),
        ("cgroup-root", FlagValue::Text(t)) => {
            config.cgroup_root = if t.is_empty() { "/".to_string() } else { t }
        }
        ("container-runtime-endpoint", FlagValue::Text(t)) => {
            config.container_runtime_endpoint = Some(t).filter(|t| !t.is_empty())
        }
        ("pod-manifest-path", FlagValue::Text(t)) => {
            config.static_pod_path = Some(t).filter(|t| !t.is_empty())
        }
        ("enforce-node-allocatable", FlagValue::Text(t)) => {
            let values: Vec<String> = t
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .collect();
            validate_enforce_node_allocatable(&values, ORIGIN, &key)?;
            config.enforce_node_allocatable = values;
        }
        // FLAGS and this match are kept in step; a mismatch is a programming error that
        // the flag tests catch, reported rather than panicking.
        _ => return Err(invalid(flag, text, "flag kind mismatch")),
    }
    Ok(())
}
