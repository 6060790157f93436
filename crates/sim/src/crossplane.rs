//! The Crossplane kinds Modelplane composes, as Crossplane and its providers
//! install them: one CRD per kind, and which provider package serves it (a
//! managed resource is reconciled only while that provider runs).

use serde_json::{Value, json};

/// One kind Crossplane (core or a provider) serves on the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// API group.
    pub group: &'static str,
    /// Served (and storage) version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource (plural) name.
    pub plural: &'static str,
    /// Namespaced (every `*.m.*` v2 managed resource is).
    pub namespaced: bool,
    /// The provider package whose pods reconcile it; `None` for Crossplane core.
    pub provider: Option<&'static str>,
}

impl Kind {
    /// `group/version`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

const fn kind(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    provider: Option<&'static str>,
) -> Kind {
    Kind {
        group,
        version,
        kind,
        plural,
        namespaced,
        provider,
    }
}

const fn managed(
    group: &'static str,
    kind_: &'static str,
    plural: &'static str,
    provider: &'static str,
) -> Kind {
    kind(group, "v1beta1", kind_, plural, true, Some(provider))
}

const EC2: &str = "ec2.aws.m.upbound.io";
const EKS: &str = "eks.aws.m.upbound.io";
const IAM: &str = "iam.aws.m.upbound.io";
const EFS: &str = "efs.aws.m.upbound.io";
const GCP_COMPUTE: &str = "compute.gcp.m.upbound.io";
const GCP_CONTAINER: &str = "container.gcp.m.upbound.io";
const GCP_PLATFORM: &str = "cloudplatform.gcp.m.upbound.io";
const AZURE_NETWORK: &str = "network.azure.m.upbound.io";
const AZURE_CONTAINER: &str = "containerservice.azure.m.upbound.io";

/// Every kind, Crossplane core first, then each provider's.
pub const KINDS: &[Kind] = &[
    kind(
        "pkg.crossplane.io",
        "v1",
        "Provider",
        "providers",
        false,
        None,
    ),
    kind(
        "pkg.crossplane.io",
        "v1beta1",
        "DeploymentRuntimeConfig",
        "deploymentruntimeconfigs",
        false,
        None,
    ),
    kind(
        "protection.crossplane.io",
        "v1beta1",
        "Usage",
        "usages",
        true,
        None,
    ),
    kind(
        "protection.crossplane.io",
        "v1beta1",
        "ClusterUsage",
        "clusterusages",
        false,
        None,
    ),
    // provider-helm and provider-kubernetes.
    managed(
        "helm.m.crossplane.io",
        "Release",
        "releases",
        "provider-helm",
    ),
    managed(
        "helm.m.crossplane.io",
        "ProviderConfig",
        "providerconfigs",
        "provider-helm",
    ),
    kind(
        "helm.m.crossplane.io",
        "v1beta1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-helm"),
    ),
    kind(
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "Object",
        "objects",
        true,
        Some("provider-kubernetes"),
    ),
    kind(
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "ProviderConfig",
        "providerconfigs",
        true,
        Some("provider-kubernetes"),
    ),
    kind(
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-kubernetes"),
    ),
    // AWS.
    managed(
        "aws.m.upbound.io",
        "ProviderConfig",
        "providerconfigs",
        "provider-family-aws",
    ),
    kind(
        "aws.m.upbound.io",
        "v1beta1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-family-aws"),
    ),
    managed(EC2, "VPC", "vpcs", "provider-aws-ec2"),
    managed(EC2, "Subnet", "subnets", "provider-aws-ec2"),
    managed(
        EC2,
        "InternetGateway",
        "internetgateways",
        "provider-aws-ec2",
    ),
    managed(EC2, "NATGateway", "natgateways", "provider-aws-ec2"),
    managed(EC2, "EIP", "eips", "provider-aws-ec2"),
    managed(EC2, "RouteTable", "routetables", "provider-aws-ec2"),
    managed(EC2, "Route", "routes", "provider-aws-ec2"),
    managed(
        EC2,
        "RouteTableAssociation",
        "routetableassociations",
        "provider-aws-ec2",
    ),
    managed(EC2, "SecurityGroup", "securitygroups", "provider-aws-ec2"),
    managed(
        EC2,
        "SecurityGroupIngressRule",
        "securitygroupingressrules",
        "provider-aws-ec2",
    ),
    managed(
        EC2,
        "SecurityGroupEgressRule",
        "securitygroupegressrules",
        "provider-aws-ec2",
    ),
    managed(EC2, "LaunchTemplate", "launchtemplates", "provider-aws-ec2"),
    managed(EKS, "Cluster", "clusters", "provider-aws-eks"),
    managed(EKS, "ClusterAuth", "clusterauths", "provider-aws-eks"),
    managed(EKS, "NodeGroup", "nodegroups", "provider-aws-eks"),
    managed(EKS, "Addon", "addons", "provider-aws-eks"),
    managed(
        EKS,
        "PodIdentityAssociation",
        "podidentityassociations",
        "provider-aws-eks",
    ),
    managed(IAM, "Role", "roles", "provider-aws-iam"),
    managed(IAM, "Policy", "policies", "provider-aws-iam"),
    managed(
        IAM,
        "RolePolicyAttachment",
        "rolepolicyattachments",
        "provider-aws-iam",
    ),
    managed(EFS, "FileSystem", "filesystems", "provider-aws-efs"),
    managed(EFS, "MountTarget", "mounttargets", "provider-aws-efs"),
    // GCP.
    managed(
        "gcp.m.upbound.io",
        "ProviderConfig",
        "providerconfigs",
        "provider-family-gcp",
    ),
    kind(
        "gcp.m.upbound.io",
        "v1beta1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-family-gcp"),
    ),
    managed(GCP_COMPUTE, "Network", "networks", "provider-gcp-compute"),
    managed(
        GCP_COMPUTE,
        "Subnetwork",
        "subnetworks",
        "provider-gcp-compute",
    ),
    managed(
        GCP_CONTAINER,
        "Cluster",
        "clusters",
        "provider-gcp-container",
    ),
    managed(
        GCP_CONTAINER,
        "NodePool",
        "nodepools",
        "provider-gcp-container",
    ),
    managed(
        GCP_PLATFORM,
        "ServiceAccount",
        "serviceaccounts",
        "provider-gcp-cloudplatform",
    ),
    managed(
        GCP_PLATFORM,
        "ServiceAccountKey",
        "serviceaccountkeys",
        "provider-gcp-cloudplatform",
    ),
    managed(
        GCP_PLATFORM,
        "ProjectIAMMember",
        "projectiammembers",
        "provider-gcp-cloudplatform",
    ),
    managed(
        GCP_PLATFORM,
        "ProjectService",
        "projectservices",
        "provider-gcp-cloudplatform",
    ),
    // Azure.
    managed(
        "azure.m.upbound.io",
        "ProviderConfig",
        "providerconfigs",
        "provider-family-azure",
    ),
    kind(
        "azure.m.upbound.io",
        "v1beta1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-family-azure"),
    ),
    managed(
        "azure.m.upbound.io",
        "ResourceGroup",
        "resourcegroups",
        "provider-family-azure",
    ),
    managed(
        AZURE_NETWORK,
        "VirtualNetwork",
        "virtualnetworks",
        "provider-azure-network",
    ),
    managed(AZURE_NETWORK, "Subnet", "subnets", "provider-azure-network"),
    managed(
        AZURE_CONTAINER,
        "KubernetesCluster",
        "kubernetesclusters",
        "provider-azure-containerservice",
    ),
    managed(
        AZURE_CONTAINER,
        "KubernetesClusterNodePool",
        "kubernetesclusternodepools",
        "provider-azure-containerservice",
    ),
    // Nebius.
    managed(
        "nebius.m.upbound.io",
        "ProviderConfig",
        "providerconfigs",
        "provider-nebius",
    ),
    kind(
        "nebius.m.upbound.io",
        "v1beta1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-nebius"),
    ),
    managed(
        "vpc.nebius.m.upbound.io",
        "Network",
        "networks",
        "provider-nebius",
    ),
    managed(
        "vpc.nebius.m.upbound.io",
        "Subnet",
        "subnets",
        "provider-nebius",
    ),
    managed(
        "mk8s.nebius.m.upbound.io",
        "Cluster",
        "clusters",
        "provider-nebius",
    ),
    managed(
        "mk8s.nebius.m.upbound.io",
        "NodeGroup",
        "nodegroups",
        "provider-nebius",
    ),
    managed(
        "compute.nebius.m.upbound.io",
        "Filesystem",
        "filesystems",
        "provider-nebius",
    ),
    managed(
        "compute.nebius.m.upbound.io",
        "GpuCluster",
        "gpuclusters",
        "provider-nebius",
    ),
    // Vultr.
    managed(
        "vultr.m.upbound.io",
        "ProviderConfig",
        "providerconfigs",
        "provider-vultr",
    ),
    kind(
        "vultr.m.upbound.io",
        "v1beta1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
        Some("provider-vultr"),
    ),
    managed(
        "vke.vultr.m.upbound.io",
        "Kubernetes",
        "kubernetes",
        "provider-vultr",
    ),
    managed(
        "vke.vultr.m.upbound.io",
        "KubernetesNodePool",
        "kubernetesnodepools",
        "provider-vultr",
    ),
];

/// The kind `api_version`/`kind`, if Crossplane serves it.
pub fn find(api_version: &str, kind: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.kind == kind && k.api_version() == api_version)
}

/// Managed resources: what a provider reconciles and answers with status
/// (provider configs and Crossplane's own kinds are not).
pub fn is_managed(kind: &Kind) -> bool {
    kind.provider.is_some() && !kind.kind.ends_with("ProviderConfig")
}

/// The CRD Crossplane installs for `kind`: any content (the real CRDs are
/// generated from each provider's Terraform schema; compose's golden tests
/// pin what Modelplane writes), a status subresource, and the printer
/// columns `kubectl get managed` shows.
pub fn crd(kind: &Kind) -> Value {
    let mut version = json!({
        "name": kind.version,
        "served": true,
        "storage": true,
        "subresources": { "status": {} },
        "schema": { "openAPIV3Schema": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        } },
    });
    if kind.kind == "Provider" {
        version["additionalPrinterColumns"] = json!([
            { "name": "INSTALLED", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Installed')].status" },
            { "name": "HEALTHY", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Healthy')].status" },
            { "name": "PACKAGE", "type": "string", "jsonPath": ".spec.package" },
            { "name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
        ]);
    }
    if is_managed(kind) {
        version["additionalPrinterColumns"] = json!([
            { "name": "SYNCED", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Synced')].status" },
            { "name": "READY", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status" },
            { "name": "EXTERNAL-NAME", "type": "string", "jsonPath": ".metadata.annotations.crossplane\\.io/external-name" },
            { "name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
        ]);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{}.{}", kind.plural, kind.group) },
        "spec": {
            "group": kind.group,
            "scope": if kind.namespaced { "Namespaced" } else { "Cluster" },
            "names": {
                "plural": kind.plural,
                "singular": kind.kind.to_lowercase(),
                "kind": kind.kind,
                "categories": if is_managed(kind) { json!(["crossplane", "managed"]) } else { json!(["crossplane"]) },
            },
            "versions": [version],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_its_crd_is_named_as_kubernetes_requires() {
        let mut seen = std::collections::BTreeSet::new();
        for kind in KINDS {
            assert!(seen.insert((kind.group, kind.kind)), "{kind:?} twice");
            let crd = crd(kind);
            assert_eq!(
                crd["metadata"]["name"],
                format!("{}.{}", kind.plural, kind.group)
            );
            assert_eq!(kind.plural, kind.plural.to_lowercase());
        }
        assert!(is_managed(
            find("eks.aws.m.upbound.io/v1beta1", "NodeGroup").expect("served")
        ));
        assert!(!is_managed(
            find("helm.m.crossplane.io/v1beta1", "ProviderConfig").expect("served")
        ));
        assert!(!is_managed(
            find("pkg.crossplane.io/v1", "Provider").expect("served")
        ));
    }
}
