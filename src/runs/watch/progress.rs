//! How far a multi-stage run (rft) is as a whole, and how long it has left.
//!
//! rft (experiments/src/rft/recipe.rs) trains `stages/pretrain` for
//! `pretrain.train.steps`, evaluates (`eval-before`; `eval-base` first when
//! it starts from a checkpoint, `model.init`), then for each of `rounds`
//! rounds samples (`datagen`), fine-tunes `stages/round-N/finetune` for
//! `finetune.train.steps` and evaluates (`eval`). The training stages log
//! steps in their own metrics.jsonl; the run's metrics.jsonl gets one row
//! per sampling and evaluation, `{"stage", "round", …, "seconds"}`. So the
//! run's training steps are known from config.toml, and the time left is
//! the steps left at the recent step time plus the samplings and
//! evaluations left at the time the last one of each took.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The stages config.toml promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub rounds: u64,
    pub pretrain_steps: u64,
    pub finetune_steps: u64,
    /// Evaluations the run makes: before the rounds, after each, and of
    /// the checkpoint it starts from (when `model.init` names one).
    pub evaluations: u64,
}

impl Plan {
    /// The plan of an rft config (`rounds`, `pretrain.train.steps`,
    /// `finetune.train.steps`); none for a single-stage run.
    pub fn of_config(config: &toml::Value) -> Option<Plan> {
        let int = |v: Option<&toml::Value>| v?.as_integer().and_then(|i| u64::try_from(i).ok());
        let steps = |table: &str| int(config.get(table)?.get("train")?.get("steps"));
        let rounds = int(config.get("rounds"))?;
        let from_checkpoint = config.get("model").and_then(|m| m.get("init")).is_some();
        Some(Plan {
            rounds,
            pretrain_steps: steps("pretrain")?,
            finetune_steps: steps("finetune")?,
            evaluations: 1 + rounds + u64::from(from_checkpoint),
        })
    }

    pub fn total_steps(&self) -> u64 {
        self.pretrain_steps + self.rounds * self.finetune_steps
    }
}

/// What the rows read so far say about the run as a whole.
#[derive(Debug, Clone)]
pub struct RunProgress {
    pub plan: Plan,
    /// The last step of each training stage (`pretrain`, `round-2/finetune`).
    stage_steps: BTreeMap<String, u64>,
    /// Rounds whose sampling ended, and how long the last one took.
    sampled: BTreeSet<u64>,
    sample_s: Option<f64>,
    /// Evaluations that ended (`eval-before`, `eval 2`), and the last one's time.
    evaluated: BTreeSet<String>,
    eval_s: Option<f64>,
    /// What the run does now: `pretrain`, `datagen`, `finetune`, `eval`…
    pub phase: Option<String>,
    pub round: Option<u64>,
}

/// Time left of the whole run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Eta {
    pub seconds: f64,
    /// A sampling or an evaluation is left whose time is not known yet
    /// (none has ended): the run takes at least `seconds`.
    pub at_least: bool,
}

impl RunProgress {
    pub fn new(plan: Plan) -> RunProgress {
        RunProgress {
            plan,
            stage_steps: BTreeMap::new(),
            sampled: BTreeSet::new(),
            sample_s: None,
            evaluated: BTreeSet::new(),
            eval_s: None,
            phase: None,
            round: None,
        }
    }

    /// A row of training stage `stage` (its directory under `stages/`).
    pub fn take_stage_row(&mut self, stage: &str, row: &Value) {
        let (round, phase) = match stage.split_once('/') {
            Some((round, phase)) => (
                round.strip_prefix("round-").and_then(|r| r.parse().ok()),
                phase,
            ),
            None => (None, stage),
        };
        self.phase = Some(phase.to_string());
        self.round = round;
        if let Some(step) = row.get("step").and_then(Value::as_u64) {
            self.stage_steps.insert(stage.to_string(), step);
        }
    }

    /// A row of the run's own metrics.jsonl naming its stage (a sampling
    /// or an evaluation that ended).
    pub fn take_run_row(&mut self, stage: &str, row: &Value) {
        let round = row.get("round").and_then(Value::as_u64);
        let seconds = row.get("seconds").and_then(Value::as_f64);
        self.phase = Some(stage.to_string());
        self.round = round.filter(|&r| r > 0);
        if stage == "datagen" {
            self.sampled.extend(round);
            self.sample_s = seconds.or(self.sample_s);
        } else if stage.starts_with("eval") {
            self.evaluated
                .insert(format!("{stage} {}", round.unwrap_or(0)));
            self.eval_s = seconds.or(self.eval_s);
        }
    }

    /// Training steps done over all stages.
    pub fn steps_done(&self) -> u64 {
        self.stage_steps
            .values()
            .sum::<u64>()
            .min(self.plan.total_steps())
    }

    /// `finetune · round 1/3 · run 900/2400 steps (38%)`
    pub fn label(&self) -> String {
        let mut label = self.phase.clone().unwrap_or_else(|| "starting".into());
        if let Some(round) = self.round {
            label += &format!(" · round {round}/{}", self.plan.rounds);
        }
        let (done, total) = (self.steps_done(), self.plan.total_steps());
        label += &format!(" · run {done}/{total} steps");
        if total > 0 {
            label += &format!(" ({:.0}%)", done as f64 / total as f64 * 100.0);
        }
        label
    }

    /// The run's time left, from the recent mean step time (none known: no
    /// estimate).
    pub fn eta(&self, mean_step_ms: Option<f64>) -> Option<Eta> {
        let steps_left = self.plan.total_steps() - self.steps_done();
        let mut seconds = steps_left as f64 * mean_step_ms? / 1e3;
        let mut at_least = false;
        let mut add = |left: u64, each: Option<f64>| match each {
            _ if left == 0 => {}
            Some(each) => seconds += left as f64 * each,
            None => at_least = true,
        };
        add(
            self.plan.rounds.saturating_sub(self.sampled.len() as u64),
            self.sample_s,
        );
        add(
            self.plan
                .evaluations
                .saturating_sub(self.evaluated.len() as u64),
            self.eval_s,
        );
        Some(Eta { seconds, at_least })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const RFT: &str = "rounds = 3\n[model]\nd_model = 8\n\
        [pretrain.train]\nsteps = 800\n[finetune.train]\nsteps = 100\n";

    fn plan() -> Plan {
        Plan::of_config(&toml::Value::Table(RFT.parse().unwrap())).unwrap()
    }

    #[test]
    fn config_toml_gives_the_run_s_stages_and_a_single_stage_run_has_none() {
        assert_eq!(
            plan(),
            Plan {
                rounds: 3,
                pretrain_steps: 800,
                finetune_steps: 100,
                evaluations: 4
            }
        );
        assert_eq!(plan().total_steps(), 1100);
        let gpt2: toml::Table = "[train]\nsteps = 300\n".parse().unwrap();
        assert_eq!(Plan::of_config(&toml::Value::Table(gpt2)), None);
        let init: toml::Table = RFT
            .replace("d_model = 8", "init = \"hf:x\"")
            .parse()
            .unwrap();
        let init = Plan::of_config(&toml::Value::Table(init)).unwrap();
        assert_eq!(init.evaluations, 5, "eval-base too");
    }

    /// The case: the first stage done is a third of the run, not
    /// its end; the sampling and evaluations left count once timed.
    #[test]
    fn the_eta_covers_every_stage_left_not_the_first_one() {
        let mut run = RunProgress::new(plan());
        run.take_stage_row("pretrain", &json!({"step": 800, "loss": 1.0}));
        assert_eq!(run.label(), "pretrain · run 800/1100 steps (73%)");
        // 300 steps of 10 ms left; 3 samplings, 4 evaluations of unknown time.
        assert_eq!(
            run.eta(Some(10.0)),
            Some(Eta {
                seconds: 3.0,
                at_least: true
            })
        );
        assert_eq!(run.eta(None), None);
        run.take_run_row("eval-before", &json!({"round": 0, "seconds": 2.0}));
        run.take_run_row("datagen", &json!({"round": 1, "seconds": 5.0}));
        assert_eq!(
            run.label(),
            "datagen · round 1/3 · run 800/1100 steps (73%)"
        );
        // 3 s of steps + 2 samplings × 5 s + 3 evaluations × 2 s.
        assert_eq!(
            run.eta(Some(10.0)),
            Some(Eta {
                seconds: 19.0,
                at_least: false
            })
        );
        run.take_stage_row("round-1/finetune", &json!({"step": 40}));
        assert_eq!(
            run.label(),
            "finetune · round 1/3 · run 840/1100 steps (76%)"
        );
        assert_eq!(run.eta(Some(10.0)).unwrap().seconds, 18.6);
    }
}
