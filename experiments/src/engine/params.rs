//! Walking a module's float parameters by their dotted path
//! (`h.0.attn.c_attn.weight`): the one place that names parameters, used by
//! checkpoints, the optimizer state and weight import/export.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use burn::tensor::TensorData;

use super::safetensors_io::Shaped;
use crate::error::UserError;

/// One float parameter: its path, id, shape and f32 values.
pub struct NamedTensor {
    pub name: String,
    pub id: ParamId,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

struct Collect {
    path: Vec<String>,
    with_values: bool,
    out: Vec<NamedTensor>,
}

impl<B: Backend> ModuleVisitor<B> for Collect {
    fn enter_module(&mut self, name: &str, _container: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        let shape = tensor.dims().to_vec();
        let values = if self.with_values {
            tensor
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        self.out.push(NamedTensor {
            name: self.path.join("."),
            id: param.id,
            shape,
            values,
        });
    }
}

/// Every float parameter in visiting order (deterministic: field order).
pub fn collect<B: Backend, M: Module<B>>(module: &M, with_values: bool) -> Vec<NamedTensor> {
    let mut visitor = Collect {
        path: Vec::new(),
        with_values,
        out: Vec::new(),
    };
    module.visit(&mut visitor);
    visitor.out
}

/// Number of parameter values that require a gradient: all of them for a
/// freshly built model on an autodiff backend, only the adapters of a LoRA
/// model (frozen weights are skipped by the optimizer).
pub fn count_trainable<B: Backend, M: Module<B>>(module: &M) -> usize {
    struct Count(usize);
    impl<B: Backend> ModuleVisitor<B> for Count {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let tensor = param.val();
            if tensor.is_require_grad() {
                self.0 += tensor.shape().num_elements();
            }
        }
    }
    let mut count = Count(0);
    module.visit(&mut count);
    count.0
}

/// Path → id, for the optimizer state.
pub fn ids_by_name<B: Backend, M: Module<B>>(module: &M) -> HashMap<String, ParamId> {
    collect::<B, M>(module, false)
        .into_iter()
        .map(|p| (p.name, p.id))
        .collect()
}

struct Replace<'a> {
    path: Vec<String>,
    source: &'a dyn Fn(&str) -> Option<Shaped>,
    missing: Vec<String>,
    mismatched: Vec<String>,
}

impl<B: Backend> ModuleMapper<B> for Replace<'_> {
    fn enter_module(&mut self, name: &str, _container: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container: &str) {
        self.path.pop();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let name = self.path.join(".");
        let (id, tensor, mapper) = param.consume();
        let Some((shape, values)) = (self.source)(&name) else {
            self.missing.push(name);
            return Param::from_mapped_value(id, tensor, mapper);
        };
        if shape != tensor.dims().to_vec() {
            self.mismatched
                .push(format!("{name}: file {shape:?}, model {:?}", tensor.dims()));
            return Param::from_mapped_value(id, tensor, mapper);
        }
        let require_grad = tensor.is_require_grad();
        let mut fresh = Tensor::<B, D>::from_data(TensorData::new(values, shape), &tensor.device());
        if require_grad {
            fresh = fresh.require_grad();
        }
        Param::from_mapped_value(id, fresh, mapper)
    }
}

/// Replace every float parameter by the values `source(name)` gives.
/// Every parameter must be found with the right shape (a usage error names
/// the missing or mismatched ones); ids are kept.
pub fn replace<B: Backend, M: Module<B>>(
    module: M,
    origin: &str,
    source: &dyn Fn(&str) -> Option<Shaped>,
) -> anyhow::Result<M> {
    let mut mapper = Replace {
        path: Vec::new(),
        source,
        missing: Vec::new(),
        mismatched: Vec::new(),
    };
    let module = module.map(&mut mapper);
    if !mapper.missing.is_empty() || !mapper.mismatched.is_empty() {
        return Err(UserError::usage(format!(
            "{origin}: weights do not fit the model (missing: [{}]; wrong shape: [{}])",
            mapper.missing.join(", "),
            mapper.mismatched.join("; ")
        ))
        .with_fix("load a file saved from a model with the same config (n_layer, n_embd, vocab)")
        .into());
    }
    Ok(module)
}
