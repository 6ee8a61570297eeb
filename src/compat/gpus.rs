//! GPU names (`env/gpus.toml`): indexing rows, aliases and families, and
//! resolving what nvidia-smi prints or a user types to one [`GpuSpec`].

use serde::{Deserialize, Serialize};

use super::data;
use super::mig::{profile_memory_gb, split_mig_name, MigName};
use super::version::{parse_compute_capability, Version};
use super::{GpuName, KnowledgeBase};
use crate::error::{Result, UserError};
use crate::host::{Gpu, GpuClass, Host, HostSource};

/// A GPU model as the knowledge base describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    pub id: String,
    pub name: String,
    pub compute_capability: String,
    pub memory_mib: Option<u64>,
    /// For an SM-only spec (`sm_120`) this is `Consumer`, the class with the
    /// fewest guarantees; `sm_only` tells callers the class is not known.
    pub class: GpuClass,
    /// True when the spec was made from an SM alone (`--assume-gpu sm_120`).
    #[serde(default)]
    pub sm_only: bool,
    /// A chip without the tensor cores its compute capability would have
    /// (GTX 16 series, TU117 MX parts: `tensor_cores = false` in the row).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lacks_tensor_cores: bool,
    /// For a family answer ("A100") whose rows differ only in memory: the
    /// smallest and largest memory of its rows (`memory_mib` is then `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_range_mib: Option<(u64, u64)>,
    /// For a family answer: the ids of the rows it stands for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    #[serde(default)]
    pub source: String,
}

/// Lower-case letters and digits only: "NVIDIA GeForce RTX 5070 Ti" → "nvidiageforcertx5070ti".
fn normalize_name(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The same without the vendor/brand words nvidia-smi prefixes, so "RTX 4090"
/// and "NVIDIA GeForce RTX 4090" meet.
fn strip_brand(normalized: &str) -> &str {
    let mut rest = normalized;
    for prefix in ["nvidia", "geforce", "tesla"] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    rest
}

/// The key a GPU name is indexed and looked up by: normalized, brand stripped.
fn gpu_key(name: &str) -> String {
    strip_brand(&normalize_name(name)).to_string()
}

/// The keys a family name is indexed by: its key and, for "RTX 3080", "3080".
fn family_keys(family: &str) -> Vec<String> {
    let key = gpu_key(family);
    let mut keys = vec![key.clone()];
    if let Some(rest) = key.strip_prefix("rtx") {
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            keys.push(rest.to_string());
        }
    }
    keys
}

/// "RTX 5070 Ti" → "rtx-5070-ti".
fn slug(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join("-")
}

/// MiB as whole GiB, rounded to nearest ("81559" → "80").
fn gib(mib: u64) -> u64 {
    (mib + 512) / 1024
}

pub(super) fn class_name(class: GpuClass) -> String {
    serde_json::to_value(class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// One SM-only spec per SM of `env/cuda.toml` (what `--assume-gpu sm_120` gets).
pub(super) fn sm_specs(cuda: &data::CudaFile) -> Vec<GpuSpec> {
    cuda.sm
        .iter()
        .filter_map(|sm| {
            let (cc, _) = parse_compute_capability(&sm.sm)?;
            let id = format!("sm_{}{}", cc.major(), cc.minor());
            Some(GpuSpec {
                name: id.clone(),
                id,
                compute_capability: cc.to_string(),
                memory_mib: None,
                class: GpuClass::Consumer,
                sm_only: true,
                lacks_tensor_cores: false,
                memory_range_mib: None,
                variants: Vec::new(),
                unconfirmed: vec!["class (described by SM only)".into()],
                source: sm.source.clone(),
            })
        })
        .collect()
}

impl KnowledgeBase {
    /// Every GPU model in `env/gpus.toml`.
    pub fn gpus(&self) -> &[GpuSpec] {
        &self.gpus
    }

    /// Index the rows of `env/gpus.toml`: every id, name and alias names one
    /// row (and must be unique); a `family` name may be shared by rows and
    /// stands for all of them. A family whose rows agree on every fact a
    /// verdict reads (compute capability and class) becomes one merged spec;
    /// otherwise the family name is ambiguous.
    pub(super) fn index_gpus(&mut self, rows: Vec<data::GpuRow>) -> Result<()> {
        let mut families: Vec<(String, String, Vec<usize>)> = Vec::new();
        for row in rows {
            let index = self.gpus.len();
            for name in row.aliases.iter().chain([&row.name, &row.id]) {
                let key = gpu_key(name);
                if let Some(GpuName::Row(previous)) =
                    self.gpu_names.insert(key.clone(), GpuName::Row(index))
                {
                    if previous != index {
                        return Err(UserError::usage(format!(
                            "env/gpus.toml: name `{name}` is used by two GPUs"
                        ))
                        .with_fix("make every alias unique, or make it a shared `family` name")
                        .into());
                    }
                }
            }
            for family in &row.family {
                for key in family_keys(family) {
                    match families.iter_mut().find(|(k, _, _)| *k == key) {
                        Some((_, _, members)) => members.push(index),
                        None => families.push((key, family.clone(), vec![index])),
                    }
                }
            }
            self.gpus.push(GpuSpec {
                id: row.id,
                name: row.name,
                compute_capability: row.compute_capability,
                memory_mib: row.memory_mib,
                class: row.class,
                sm_only: false,
                lacks_tensor_cores: row.tensor_cores == Some(false),
                memory_range_mib: None,
                variants: Vec::new(),
                unconfirmed: row.unconfirmed,
                source: row.source,
            });
        }
        self.gpu_rows = self
            .gpu_names
            .iter()
            .filter_map(|(key, name)| match name {
                GpuName::Row(index) => Some((key.clone(), *index)),
                _ => None,
            })
            .collect();
        // A family named exactly like one of its rows ("RTX 5080": the desktop
        // card's own name; its laptop part is "RTX 5080 Laptop GPU") stands
        // for that row, and so does its short form ("5080"): a desktop card
        // must not inherit its laptop sibling's notes or unknown memory.
        let own_row = |family: &str, members: &[usize]| {
            let key = gpu_key(family);
            members
                .iter()
                .copied()
                .find(|i| gpu_key(&self.gpus[*i].name) == key)
        };
        let owners: Vec<Option<usize>> = families
            .iter()
            .map(|(_, family, members)| own_row(family, members))
            .collect();
        for ((key, family, mut members), owner) in families.into_iter().zip(owners) {
            members.dedup();
            // A family name that is also the name or alias of a row outside
            // the family is a defect in the data.
            if let Some(GpuName::Row(row)) = self.gpu_names.get(&key) {
                if !members.contains(row) {
                    return Err(UserError::usage(format!(
                        "env/gpus.toml: `{family}` is a family and the name of {}, which is not in it",
                        self.gpus[*row].id
                    ))
                    .with_fix("add the family to that row or remove the alias")
                    .into());
                }
            }
            let name = if let Some(row) = owner {
                GpuName::Row(row)
            } else if members.len() == 1 {
                GpuName::Row(members[0])
            } else if let Some(spec) = self.merge_family(&family, &members) {
                self.family_specs.push(spec);
                GpuName::Family(self.family_specs.len() - 1)
            } else {
                GpuName::Ambiguous(members)
            };
            self.gpu_names.insert(key, name);
        }
        Ok(())
    }

    /// One spec for rows that agree on compute capability, class and tensor
    /// cores (the GPU facts verdicts read), or `None` when they differ.
    fn merge_family(&self, family: &str, members: &[usize]) -> Option<GpuSpec> {
        let rows: Vec<&GpuSpec> = members.iter().map(|i| &self.gpus[*i]).collect();
        let first = rows[0];
        if rows.iter().any(|r| {
            r.compute_capability != first.compute_capability
                || r.class != first.class
                || r.lacks_tensor_cores != first.lacks_tensor_cores
        }) {
            return None;
        }
        let memories: Vec<u64> = rows.iter().filter_map(|r| r.memory_mib).collect();
        let (memory_mib, memory_range_mib) = match (memories.iter().min(), memories.iter().max()) {
            // Every variant's memory is known and equal: a plain figure.
            (Some(lo), Some(hi)) if lo == hi && memories.len() == rows.len() => (Some(*lo), None),
            (Some(lo), Some(hi)) if memories.len() == rows.len() => (None, Some((*lo, *hi))),
            _ => (None, None),
        };
        let mut id = slug(family);
        if self.gpus.iter().any(|g| g.id == id) {
            id.push_str("-family");
        }
        let mut unconfirmed: Vec<String> = Vec::new();
        for row in &rows {
            for fact in &row.unconfirmed {
                let fact = format!("{}: {fact}", row.id);
                if !unconfirmed.contains(&fact) {
                    unconfirmed.push(fact);
                }
            }
        }
        let mut sources: Vec<&str> = Vec::new();
        for row in &rows {
            if !sources.contains(&row.source.as_str()) {
                sources.push(&row.source);
            }
        }
        Some(GpuSpec {
            id,
            name: family.to_string(),
            compute_capability: first.compute_capability.clone(),
            memory_mib,
            class: first.class,
            sm_only: false,
            lacks_tensor_cores: first.lacks_tensor_cores,
            memory_range_mib,
            variants: rows.iter().map(|r| r.id.clone()).collect(),
            unconfirmed,
            source: sources.join(" ; "),
        })
    }

    /// Find a GPU by the name nvidia-smi prints ("NVIDIA A100-SXM4-80GB"),
    /// the name people type ("5070 Ti", "A100", "3080"), a family or merged
    /// spec's id, or an SM ("sm_120", "12.0"). Exact (case-, space- and
    /// punctuation-insensitive) matches only; an ambiguous family gives `None`.
    pub fn lookup_gpu(&self, query: &str) -> Option<&GpuSpec> {
        // An id names its row even where a family shares its key
        // ("rtx-4090" the desktop card, "RTX 4090" the family).
        let id = query.trim();
        if let Some(spec) = self
            .gpus
            .iter()
            .chain(&self.family_specs)
            .find(|s| s.id == id)
        {
            return Some(spec);
        }
        match self.gpu_name(query) {
            Some(GpuName::Row(index)) => return self.gpus.get(*index),
            Some(GpuName::Family(index)) => return self.family_specs.get(*index),
            Some(GpuName::Ambiguous(_)) => return None,
            None => {}
        }
        let (cc, _) = parse_compute_capability(query)?;
        let cc = cc.to_string();
        self.sm_specs
            .iter()
            .find(|spec| spec.compute_capability == cc)
    }

    fn gpu_name(&self, query: &str) -> Option<&GpuName> {
        let key = gpu_key(query);
        if key.is_empty() {
            return None;
        }
        self.gpu_names.get(&key)
    }

    /// Like [`lookup_gpu`](Self::lookup_gpu), but an unknown or ambiguous name
    /// is a usage error naming the value and listing the choices (with the
    /// compute capability and class that tell them apart).
    pub fn resolve_gpu(&self, query: &str) -> Result<&GpuSpec> {
        if let Some(GpuName::Ambiguous(members)) = self.gpu_name(query) {
            let choices: Vec<String> = members
                .iter()
                .map(|i| {
                    let g = &self.gpus[*i];
                    format!(
                        "{} ({}, cc {}, {})",
                        g.id,
                        g.name,
                        g.compute_capability,
                        class_name(g.class)
                    )
                })
                .collect();
            return Err(UserError::usage(format!(
                "--assume-gpu `{query}` is ambiguous: {}",
                choices.join("; ")
            ))
            .with_fix("name one of them (its id or full name), or give its SM such as sm_89")
            .into());
        }
        if let Some(spec) = self.lookup_gpu(query) {
            return Ok(spec);
        }
        // A did-you-mean of the few closest names, not every GPU envgen
        // knows (that was ~230 ids for one typo; issue #44).
        let key = gpu_key(query);
        let mut close: Vec<&str> = Vec::new();
        let mut names: Vec<&str> = self.gpu_names.keys().map(String::as_str).collect();
        names.sort_unstable();
        for name in crate::suggest::closest(&key, names) {
            let ids: Vec<&str> = match &self.gpu_names[name] {
                GpuName::Row(i) => vec![self.gpus[*i].id.as_str()],
                GpuName::Family(i) => vec![self.family_specs[*i].id.as_str()],
                GpuName::Ambiguous(m) => m.iter().map(|i| self.gpus[*i].id.as_str()).collect(),
            };
            for id in ids {
                if !close.contains(&id) {
                    close.push(id);
                }
            }
        }
        close.truncate(crate::suggest::MAX_SUGGESTIONS);
        let choices = if close.is_empty() {
            "no GPU envgen knows is close to it: name one of env/gpus.toml by its id or full name"
                .to_string()
        } else {
            format!("did you mean {}?", close.join(", "))
        };
        Err(
            UserError::usage(format!("--assume-gpu `{query}` is not a GPU envgen knows"))
                .with_fix(format!(
                    "{choices} Or give an SM such as sm_120 / 12.0 (add new GPUs to env/gpus.toml)"
                ))
                .into(),
        )
    }

    /// "81920 MiB", "40–80 GiB" (a family whose variants differ in memory) or
    /// "memory unknown": how doctor describes a GPU's memory.
    pub fn memory_text(&self, gpu: &Gpu) -> String {
        if let Some(mib) = gpu.memory_mib {
            return format!("{mib} MiB");
        }
        if let Some(slice) = self.mig_memory_text(gpu) {
            return slice;
        }
        let range = gpu
            .catalog_id
            .as_deref()
            .and_then(|id| self.lookup_gpu(id))
            .and_then(|spec| spec.memory_range_mib);
        match range {
            Some((lo, hi)) => format!("{}–{} GiB", gib(lo), gib(hi)),
            None => "memory unknown".to_string(),
        }
    }

    /// Fill class, compute capability and catalog id of probed GPUs from their
    /// names, and the driver's CUDA version from the driver version.
    pub fn enrich(&self, host: &mut Host) {
        let mut notes = Vec::new();
        for gpu in &mut host.gpus {
            // The driver names one device: its own row before a family.
            let exact = self
                .gpu_rows
                .get(&gpu_key(&gpu.name))
                .map(|i| &self.gpus[*i]);
            let own = exact
                .or_else(|| self.lookup_gpu(&gpu.name))
                .filter(|spec| !spec.sm_only);
            // A MIG slice ("… A100-SXM4-40GB MIG 1g.5gb") is its board's row.
            let mig = own.is_none().then(|| self.mig_board(&gpu.name)).flatten();
            let Some(spec) = own.or(mig.map(|(board, _)| board)) else {
                continue;
            };
            if let Some((board, name)) = mig {
                notes.push(self.mig_note(gpu, board, name));
            } else {
                // A slice has a share of the board's memory, not all of it.
                gpu.memory_mib = gpu.memory_mib.or(spec.memory_mib);
            }
            gpu.compute_capability
                .get_or_insert_with(|| spec.compute_capability.clone());
            gpu.class.get_or_insert(spec.class);
            gpu.catalog_id = Some(spec.id.clone());
        }
        host.notes.extend(notes);
        if host.cuda_driver_version.is_none() {
            host.cuda_driver_version = host
                .driver_version
                .as_deref()
                .and_then(Version::parse)
                .and_then(|driver| self.max_cuda_for_driver(&driver))
                .map(|cuda| cuda.to_string());
        }
    }

    /// A host described by `--assume-gpu` / `--assume-driver` (usage error naming a bad value).
    pub fn assumed_host(&self, gpus: &[String], driver: Option<&str>) -> Result<Host> {
        let mut host = Host {
            source: HostSource::Assumed,
            ..Host::default()
        };
        for (index, query) in gpus.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            // A MIG name is its board's facts under the slice's name.
            if let Some(mig) = split_mig_name(query) {
                let spec = self.resolve_mig_board(query, mig)?;
                let gpu = Gpu {
                    index,
                    name: format!("{} MIG {}", spec.name, mig.profile),
                    compute_capability: Some(spec.compute_capability.clone()),
                    memory_mib: None,
                    class: Some(spec.class),
                    catalog_id: Some(spec.id.clone()),
                    ..Gpu::default()
                };
                host.notes.push(self.mig_note(&gpu, spec, mig));
                host.gpus.push(gpu);
                continue;
            }
            let spec = self.resolve_gpu(query)?;
            host.gpus.push(Gpu {
                index,
                name: spec.name.clone(),
                compute_capability: Some(spec.compute_capability.clone()),
                memory_mib: spec.memory_mib,
                class: (!spec.sm_only).then_some(spec.class),
                catalog_id: Some(spec.id.clone()),
                ..Gpu::default()
            });
        }
        if let Some(text) = driver {
            let version = super::drivers::parse_assumed_driver(text)?;
            host.cuda_driver_version = self.max_cuda_for_driver(&version).map(|v| v.to_string());
            host.driver_version = Some(text.trim().to_string());
        }
        Ok(host)
    }
}

/// MIG slices (issue #43): their board, and the note on what MIG changes.
impl KnowledgeBase {
    /// Is `spec` (a row, or a family whose every row) a MIG-capable board?
    fn splits_into_mig(&self, spec: &GpuSpec) -> bool {
        let boards = &self.mig.boards;
        if spec.variants.is_empty() {
            boards.contains(&spec.id)
        } else {
            spec.variants.iter().all(|id| boards.contains(id))
        }
    }

    /// The board spec of an `--assume-gpu` MIG name, or a usage error naming
    /// the value: an unknown or ambiguous board as for any GPU name, and a
    /// board the MIG user guide does not list.
    pub(super) fn resolve_mig_board(&self, query: &str, mig: MigName<'_>) -> Result<&GpuSpec> {
        let spec = self.resolve_gpu(mig.board)?;
        if spec.sm_only || !self.splits_into_mig(spec) {
            return Err(UserError::usage(format!(
                "--assume-gpu `{query}`: {} cannot be split into MIG slices (not among the GPUs of NVIDIA's MIG user guide)",
                spec.name
            ))
            .with_fix(format!(
                "name the whole GPU (`{}`), or a MIG-capable board such as \"A100-SXM4-40GB MIG 1g.5gb\" (add boards to [mig] in env/gpus.toml)",
                mig.board
            ))
            .into());
        }
        Ok(spec)
    }

    /// The board of a probed MIG device name, if envgen knows it.
    pub(super) fn mig_board<'n>(&self, name: &'n str) -> Option<(&GpuSpec, MigName<'n>)> {
        let mig = split_mig_name(name)?;
        let spec = self.lookup_gpu(mig.board).filter(|spec| !spec.sm_only)?;
        Some((spec, mig))
    }

    /// The host note for a MIG slice: what it is, and what MIG changes.
    pub(super) fn mig_note(&self, gpu: &Gpu, board: &GpuSpec, mig: MigName<'_>) -> String {
        let memory = profile_memory_gb(mig.profile)
            .map(|gb| format!(" with {gb} GB of its memory"))
            .unwrap_or_default();
        format!(
            "GPU {} is MIG slice {} of {}{memory}: every verdict is the board's (compute capability {}, {}); but {}",
            gpu.index,
            mig.profile,
            board.name,
            board.compute_capability,
            class_name(board.class),
            self.mig.limits
        )
    }

    /// "5 GB (MIG 1g.5gb)" for a slice whose memory was not reported.
    pub(super) fn mig_memory_text(&self, gpu: &Gpu) -> Option<String> {
        let mig = split_mig_name(&gpu.name)?;
        let gb = profile_memory_gb(mig.profile)?;
        Some(format!("{gb} GB (MIG {})", mig.profile))
    }
}

#[cfg(test)]
mod tests;
