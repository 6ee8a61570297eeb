//! TensorBoard's HParams dashboard (W&B's config table once synced): a
//! run's `config.toml` keys as its hyperparameters.
//!
//! Each run's event file holds `_hparams_/session_start_info` (the run is
//! one session, its config keys flattened to `train.steps`-like names).
//! The `_hparams_/experiment` summary (which keys and which metrics the
//! dashboard lists) is written only by `envgen runs export --tensorboard`,
//! at the export folder's top, for the runs it exports: the plugin takes
//! the experiment of whichever run has one "arbitrarily"
//! (`backend_context.py`, `_find_experiment_tag`), so one per run would
//! hide the keys of every other experiment in a folder of mixed runs;
//! without one it makes the experiment from the sessions' keys and every
//! scalar tag (each run's last value is its metric).
//!
//! Field numbers, as TensorBoard 2.21 declares them
//! (`tensorboard/plugins/hparams/{plugin_data,api}_pb2.py`,
//! `google/protobuf/struct_pb2.py`): HParamsPluginData: version = 1,
//! experiment = 2, session_start_info = 3. SessionStartInfo: hparams = 1
//! (map<string, Value>: entry key = 1, value = 2), group_name = 4,
//! start_time_secs = 5. Experiment: time_created_secs = 3, hparam_infos =
//! 4, metric_infos = 5. HParamInfo: name = 1, type = 4 (DataType: STRING
//! 1, BOOL 2, FLOAT64 3). MetricInfo: name = 1; MetricName: group = 1,
//! tag = 2. google.protobuf.Value: number_value = 2, string_value = 3,
//! bool_value = 4. The summary value carries the plugin's null tensor
//! (DT_FLOAT = 1, shape [0]: TensorShapeProto dim = 2, Dim size = 1).

use std::collections::BTreeMap;

use super::super::run_files::unix_now as now;
use super::{event, Proto};

pub const EXPERIMENT_TAG: &str = "_hparams_/experiment";
pub const SESSION_START_TAG: &str = "_hparams_/session_start_info";

/// One hyperparameter's value, as the dashboard types it.
#[derive(Debug, Clone, PartialEq)]
pub enum HParam {
    Number(f64),
    Text(String),
    Bool(bool),
}

impl HParam {
    /// `google.protobuf.Value`.
    fn value(&self) -> Proto {
        match self {
            HParam::Number(n) => Proto::default().double(2, *n),
            HParam::Text(s) => Proto::default().bytes(3, s.as_bytes()),
            HParam::Bool(b) => Proto::default().varint(4, u64::from(*b)),
        }
    }

    /// `DataType` of the experiment's `HParamInfo`.
    fn data_type(&self) -> u64 {
        match self {
            HParam::Text(_) => 1,
            HParam::Bool(_) => 2,
            HParam::Number(_) => 3,
        }
    }
}

/// The keys of `config` (config.toml's text) as hyperparameters: nested
/// tables joined with `.`, arrays and dates as their TOML text. A config
/// that does not parse gives none (the run's config text is still shown).
pub fn of_config(config: &str) -> BTreeMap<String, HParam> {
    let mut out = BTreeMap::new();
    if let Ok(table) = config.parse::<toml::Table>() {
        flatten("", &toml::Value::Table(table), &mut out);
    }
    out
}

fn flatten(name: &str, v: &toml::Value, out: &mut BTreeMap<String, HParam>) {
    let value = match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if name.is_empty() {
                    k.clone()
                } else {
                    format!("{name}.{k}")
                };
                flatten(&key, v, out);
            }
            return;
        }
        // i64 beyond 2^53 loses digits in a double; a config's are small.
        toml::Value::Integer(i) => HParam::Number(*i as f64),
        toml::Value::Float(f) => HParam::Number(*f),
        toml::Value::Boolean(b) => HParam::Bool(*b),
        toml::Value::String(s) => HParam::Text(s.clone()),
        other => HParam::Text(other.to_string()),
    };
    out.insert(name.to_string(), value);
}

/// The event of one hparams summary at step 0: `data` is the
/// HParamsPluginData (version 0, left out as proto3 does).
fn summary_event(tag: &str, data: Proto) -> Vec<u8> {
    let plugin = Proto::default().bytes(1, b"hparams").bytes(2, &data.0);
    let metadata = Proto::default().message(1, plugin);
    let shape = Proto::default().message(2, Proto::default());
    let null_tensor = Proto::default().varint(1, 1).message(2, shape);
    let value = Proto::default()
        .bytes(1, tag.as_bytes())
        .message(9, metadata)
        .message(8, null_tensor);
    event(0, now(), Proto::default().message(1, value))
}

/// `_hparams_/session_start_info` of a run with `hparams`.
pub fn session_start_event(hparams: &BTreeMap<String, HParam>) -> Vec<u8> {
    let info = hparams
        .iter()
        .fold(Proto::default(), |info, (name, v)| {
            let entry = Proto::default()
                .bytes(1, name.as_bytes())
                .message(2, v.value());
            info.message(1, entry)
        })
        .double(5, now());
    summary_event(SESSION_START_TAG, Proto::default().message(3, info))
}

/// `_hparams_/experiment` listing `hparams` (name and type; the first
/// type seen of a name wins) and `metrics` (scalar tags of the runs).
pub fn experiment_event(hparams: &BTreeMap<String, HParam>, metrics: &[String]) -> Vec<u8> {
    let mut experiment = Proto::default().double(3, now());
    for (name, v) in hparams {
        let info = Proto::default()
            .bytes(1, name.as_bytes())
            .varint(4, v.data_type());
        experiment = experiment.message(4, info);
    }
    for tag in metrics {
        let name = Proto::default().bytes(2, tag.as_bytes());
        experiment = experiment.message(5, Proto::default().message(1, name));
    }
    summary_event(EXPERIMENT_TAG, Proto::default().message(2, experiment))
}
