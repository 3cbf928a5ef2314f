//! The operator's side of the pre-pull (`GET`/`PUT /prepull`): the images declared ahead of an
//! event, checked as a manifest's would be, and where they stand on the stack nodes.

use std::collections::BTreeSet;

use super::{StackError, Stacks};
use crate::prepull::Readiness;
use crate::tenancy::Scope;
use crate::validate::check_image;

/// Most images one declaration names: each is a container of the pre-pull pod on every node.
pub const MAX_PREPULL_IMAGES: usize = 200;

impl Stacks {
    /// Replaces the images `scope` declared (a tenant's list, or the deployment's for a key of
    /// every tenant; the nodes get every list); each must pass the manifests' image rules (the allowlist
    /// included), so a declaration cannot make the nodes pull from where a stack could not.
    pub async fn declare_prepull(&self, images: &[String], scope: &Scope) -> Result<Readiness, StackError> {
        if images.len() > MAX_PREPULL_IMAGES {
            return Err(StackError::Invalid(format!(
                "images: at most {MAX_PREPULL_IMAGES} may be declared (got {})",
                images.len()
            )));
        }
        for (index, image) in images.iter().enumerate() {
            check_image(image, &self.config.validation, &format!("images[{index}]"))
                .map_err(|rejection| StackError::Invalid(rejection.to_string()))?;
        }
        let images: BTreeSet<String> = images.iter().cloned().collect();
        let nodes = self.cluster.list_nodes().await?;
        Ok(self.prepull.declare(scope, images, &nodes).await?)
    }

    /// Where each image the pre-pull keeps for `scope` stands on the stack nodes.
    pub async fn prepull_readiness(&self, scope: &Scope) -> Result<Readiness, StackError> {
        let nodes = self.cluster.list_nodes().await?;
        Ok(self.prepull.readiness(scope, &nodes).await?)
    }
}
