//! Volume types and sizes. Only volumes that live and die with the pod, or project the stack
//! namespace's own ConfigMaps/Secrets and pod fields, are accepted: emptyDir, configMap,
//! secret, downwardAPI, and projected (without service account tokens, cluster trust bundles or
//! pod certificates). Every field of `Volume` is named below, so a new volume type in an
//! upgraded k8s-openapi fails to compile until it is decided.

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, Volume, VolumeProjection};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::Rejection;
use super::rejection::forbid_any;
use crate::quantity::{format_bytes, parse_bytes};

const ALLOWED_TYPES: &str = "only emptyDir, configMap, secret, downwardAPI and projected volumes are allowed";

pub(super) fn check(spec: &PodSpec) -> Result<(), Rejection> {
    for (index, volume) in spec.volumes.iter().flatten().enumerate() {
        check_volume(volume, &format!("spec.volumes[{index}]"))?;
    }
    Ok(())
}

fn check_volume(volume: &Volume, at: &str) -> Result<(), Rejection> {
    let Volume {
        aws_elastic_block_store,
        azure_disk,
        azure_file,
        cephfs,
        cinder,
        config_map,
        csi,
        downward_api,
        empty_dir,
        ephemeral,
        fc,
        flex_volume,
        flocker,
        gce_persistent_disk,
        git_repo,
        glusterfs,
        host_path,
        image,
        iscsi,
        name,
        nfs,
        persistent_volume_claim,
        photon_persistent_disk,
        portworx_volume,
        projected,
        quobyte,
        rbd,
        scale_io,
        secret,
        storageos,
        vsphere_volume,
    } = volume;
    let forbidden = [
        ("awsElasticBlockStore", aws_elastic_block_store.is_some()),
        ("azureDisk", azure_disk.is_some()),
        ("azureFile", azure_file.is_some()),
        ("cephfs", cephfs.is_some()),
        ("cinder", cinder.is_some()),
        ("csi", csi.is_some()),
        ("ephemeral", ephemeral.is_some()),
        ("fc", fc.is_some()),
        ("flexVolume", flex_volume.is_some()),
        ("flocker", flocker.is_some()),
        ("gcePersistentDisk", gce_persistent_disk.is_some()),
        ("gitRepo", git_repo.is_some()),
        ("glusterfs", glusterfs.is_some()),
        ("hostPath", host_path.is_some()),
        ("image", image.is_some()),
        ("iscsi", iscsi.is_some()),
        ("nfs", nfs.is_some()),
        ("persistentVolumeClaim", persistent_volume_claim.is_some()),
        ("photonPersistentDisk", photon_persistent_disk.is_some()),
        ("portworxVolume", portworx_volume.is_some()),
        ("quobyte", quobyte.is_some()),
        ("rbd", rbd.is_some()),
        ("scaleIO", scale_io.is_some()),
        ("storageos", storageos.is_some()),
        ("vsphereVolume", vsphere_volume.is_some()),
    ];
    forbid_any(at, &forbidden, ALLOWED_TYPES)?;
    if name.is_empty() {
        return Err(Rejection::required(format!("{at}.name")));
    }
    let sources = [
        config_map.is_some(),
        downward_api.is_some(),
        empty_dir.is_some(),
        projected.is_some(),
        secret.is_some(),
    ];
    if sources.iter().filter(|set| **set).count() > 1 {
        return Err(Rejection::new(at, "must have exactly one volume source"));
    }
    if let Some(empty_dir) = empty_dir {
        check_empty_dir(empty_dir, &format!("{at}.emptyDir"))?;
    }
    for (index, source) in projected.iter().flat_map(|p| p.sources.iter().flatten()).enumerate() {
        check_projection(source, &format!("{at}.projected.sources[{index}]"))?;
    }
    Ok(())
}

fn check_empty_dir(empty_dir: &EmptyDirVolumeSource, at: &str) -> Result<(), Rejection> {
    match empty_dir.medium.as_deref() {
        None | Some("" | "Memory") => {}
        Some(_) => {
            return Err(Rejection::new(format!("{at}.medium"), "must be Memory or unset"));
        }
    }
    if let Some(size) = &empty_dir.size_limit {
        parse_bytes(&size.0).map_err(|err| Rejection::new(format!("{at}.sizeLimit"), err.to_string()))?;
    }
    Ok(())
}

fn check_projection(source: &VolumeProjection, at: &str) -> Result<(), Rejection> {
    let VolumeProjection {
        cluster_trust_bundle,
        config_map: _,
        downward_api: _,
        pod_certificate,
        secret: _,
        service_account_token,
    } = source;
    let forbidden = [
        (
            "serviceAccountToken",
            service_account_token.is_some(),
            "stacks get no API token",
        ),
        (
            "clusterTrustBundle",
            cluster_trust_bundle.is_some(),
            "stacks get no cluster credentials",
        ),
        (
            "podCertificate",
            pod_certificate.is_some(),
            "stacks get no cluster credentials",
        ),
    ];
    match forbidden.iter().find(|(_, set, _)| *set) {
        Some((field, _, why)) => Err(Rejection::forbidden_because(format!("{at}.{field}"), why)),
        None => Ok(()),
    }
}

/// Gives every emptyDir (and every volume without a source, which Kubernetes turns into an
/// emptyDir) a `sizeLimit` of at most `limit_bytes`, and `medium: Memory` if `in_memory`: the
/// kubelet then mounts a tmpfs of that size, a bound the kernel enforces on every write, where a
/// disk-backed emptyDir is only measured (`du`) every minute or two. Call after [`check`].
pub(super) fn cap_empty_dirs(spec: &mut PodSpec, limit_bytes: i64, in_memory: bool) {
    for volume in spec.volumes.iter_mut().flatten() {
        let sourceless = volume.config_map.is_none()
            && volume.downward_api.is_none()
            && volume.projected.is_none()
            && volume.secret.is_none();
        if sourceless && volume.empty_dir.is_none() {
            volume.empty_dir = Some(EmptyDirVolumeSource::default());
        }
        if let Some(empty_dir) = &mut volume.empty_dir {
            let asked = empty_dir.size_limit.as_ref().and_then(|q| parse_bytes(&q.0).ok());
            let size = asked.map_or(limit_bytes, |asked| asked.min(limit_bytes));
            empty_dir.size_limit = Some(Quantity(format_bytes(size)));
            if in_memory {
                empty_dir.medium = Some("Memory".into());
            }
        }
    }
}
