//! EKSCluster → AWS managed resources (`behavior.md` §9 compose-eks-cluster,
//! §8.2 EKS extras, `api.md` §10.1, §10.6).
//!
//! Network: one VPC; per availability zone a private subnet (the spec's
//! `subnetCidrs[i]` for the i-th zone alphabetically) and a public /24 from
//! the top of the VPC range; one NAT gateway in the first zone. Nodes live
//! in private subnets. Pools: the injected `system` pool plus one managed
//! node group per GPU pool, labelled and tainted; a capacity block or EFA
//! fabric adds a launch template. Storage: an EFS file system with a mount
//! target per zone, exposed once its ID is known as the StorageClass
//! `modelplane-rwx-efs`.

use std::collections::BTreeSet;

use modelplane_api::labels;
use modelplane_api::types::{EKSCluster, EksNodePool};
use serde_json::{Value, json};

use super::{Builder, GPU_TAINT_KEY};
use crate::{Composition, ReadinessRule};

const EC2: &str = "ec2.aws.m.upbound.io/v1beta1";
const EKS: &str = "eks.aws.m.upbound.io/v1beta1";
const IAM: &str = "iam.aws.m.upbound.io/v1beta1";
const EFS: &str = "efs.aws.m.upbound.io/v1beta1";

const DEFAULT_VPC_CIDR: &str = "10.0.0.0/16";
const DEFAULT_SUBNET_CIDRS: [&str; 3] = ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"];
const SYSTEM_INSTANCE_TYPE: &str = "m6i.xlarge";
const GPU_AMI_TYPE: &str = "AL2023_x86_64_NVIDIA";
/// The managed RWX class for model caches.
pub const STORAGE_CLASS: &str = "modelplane-rwx-efs";
const ADDONS: [&str; 5] = [
    "vpc-cni",
    "kube-proxy",
    "coredns",
    "eks-pod-identity-agent",
    "aws-efs-csi-driver",
];

/// What composing an EKSCluster reads.
#[derive(Clone, Copy, Debug)]
pub struct EksInputs<'a> {
    /// The XR.
    pub cluster: &'a EKSCluster,
    /// The EKS cluster and its ClusterAuth are observed Ready.
    pub control_plane_ready: bool,
    /// `status.atProvider.id` of the observed EFS file system.
    pub file_system_id: Option<&'a str>,
}

fn trust(service: &str) -> String {
    let action = if service == "pods.eks.amazonaws.com" {
        json!(["sts:AssumeRole", "sts:TagSession"])
    } else {
        json!("sts:AssumeRole")
    };
    json!({
        "Version": "2012-10-17",
        "Statement": [{ "Effect": "Allow", "Principal": { "Service": service }, "Action": action }],
    })
    .to_string()
}

/// The i-th public /24 at the top of a VPC range of /16 or wider.
fn public_cidr(vpc: &str, i: usize) -> Option<String> {
    let (address, prefix) = vpc.split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    let octets: Vec<u8> = address
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let third = 255usize.checked_sub(i)?;
    (prefix <= 16 && octets.len() == 4).then(|| format!("{}.{}.{third}.0/24", octets[0], octets[1]))
}

/// The zones the cluster spans: every pool's zones, topped up with
/// `<region>a`, `<region>b`… to the two an EKS control plane needs (three
/// when no pool names any), sorted, at most one per subnet CIDR.
fn zones(cluster: &EKSCluster, cidrs: usize) -> Vec<String> {
    let mut zones: BTreeSet<String> = cluster
        .spec
        .node_pools
        .iter()
        .flat_map(|p| p.zones.iter().flatten().cloned())
        .collect();
    let wanted = if zones.is_empty() { 3 } else { 2 };
    for letter in ["a", "b", "c", "d"] {
        if zones.len() >= wanted.min(cidrs) {
            break;
        }
        zones.insert(format!("{}{letter}", cluster.spec.region));
    }
    zones.into_iter().take(cidrs).collect()
}

fn network(b: &mut Builder<'_>, region: &str, vpc_cidr: &str, cidrs: &[String], zones: &[String]) {
    b.managed(EC2, "VPC", "vpc", json!({
        "region": region, "cidrBlock": vpc_cidr, "enableDnsHostnames": true, "enableDnsSupport": true,
        "tags": { "Name": b.xr },
    }));
    b.managed(
        EC2,
        "InternetGateway",
        "igw",
        json!({ "region": region, "vpcIdRef": b.reference("vpc") }),
    );
    for route_table in ["public", "private"] {
        b.managed(
            EC2,
            "RouteTable",
            &format!("{route_table}-rt"),
            json!({ "region": region, "vpcIdRef": b.reference("vpc") }),
        );
    }
    for (i, zone) in zones.iter().enumerate() {
        b.managed(EC2, "Subnet", &format!("private-{zone}"), json!({
            "region": region, "availabilityZone": zone, "cidrBlock": cidrs[i], "vpcIdRef": b.reference("vpc"),
            "tags": { "kubernetes.io/role/internal-elb": "1" },
        }));
        let Some(public) = public_cidr(vpc_cidr, i) else {
            continue;
        };
        b.managed(EC2, "Subnet", &format!("public-{zone}"), json!({
            "region": region, "availabilityZone": zone, "cidrBlock": public, "vpcIdRef": b.reference("vpc"),
            "mapPublicIpOnLaunch": true, "tags": { "kubernetes.io/role/elb": "1" },
        }));
        for side in ["public", "private"] {
            b.managed(
                EC2,
                "RouteTableAssociation",
                &format!("{side}-{zone}-rta"),
                json!({
                    "region": region, "routeTableIdRef": b.reference(&format!("{side}-rt")),
                    "subnetIdRef": b.reference(&format!("{side}-{zone}")),
                }),
            );
        }
    }
    if let Some(first) = zones.first().filter(|_| public_cidr(vpc_cidr, 0).is_some()) {
        b.managed(
            EC2,
            "EIP",
            "nat-eip",
            json!({ "region": region, "domain": "vpc" }),
        );
        b.managed(EC2, "NATGateway", "nat", json!({
            "region": region, "allocationIdRef": b.reference("nat-eip"), "subnetIdRef": b.reference(&format!("public-{first}")),
        }));
        b.managed(EC2, "Route", "public-default", json!({
            "region": region, "routeTableIdRef": b.reference("public-rt"), "destinationCidrBlock": "0.0.0.0/0",
            "gatewayIdRef": b.reference("igw"),
        }));
        b.managed(EC2, "Route", "private-default", json!({
            "region": region, "routeTableIdRef": b.reference("private-rt"), "destinationCidrBlock": "0.0.0.0/0",
            "natGatewayIdRef": b.reference("nat"),
        }));
    }
}

fn role(b: &mut Builder<'_>, part: &str, service: &str, policies: &[&str]) {
    b.managed(
        IAM,
        "Role",
        part,
        json!({ "assumeRolePolicy": trust(service) }),
    );
    for policy in policies {
        // A policy's name may hold `_` (AmazonEKS_CNI_Policy), which no
        // Kubernetes name may.
        let short: String = policy
            .rsplit('/')
            .next()
            .unwrap_or(policy)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        b.managed(
            IAM,
            "RolePolicyAttachment",
            &format!("{part}-{short}"),
            json!({
                "policyArn": policy, "roleRef": b.reference(part),
            }),
        );
    }
}

/// A role for a pod's service account, through EKS Pod Identity.
fn pod_identity(
    b: &mut Builder<'_>,
    region: &str,
    part: &str,
    namespace: &str,
    service_account: &str,
) {
    b.managed(
        EKS,
        "PodIdentityAssociation",
        &format!("{part}-identity"),
        json!({
            "region": region, "clusterNameRef": b.reference("cluster"), "namespace": namespace,
            "serviceAccount": service_account, "roleArnRef": b.reference(part),
        }),
    );
}

fn iam(b: &mut Builder<'_>, region: &str) {
    role(
        b,
        "cluster-role",
        "eks.amazonaws.com",
        &["arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"],
    );
    role(
        b,
        "node-role",
        "ec2.amazonaws.com",
        &[
            "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
            "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
            "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
        ],
    );
    let autoscaling = json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags", "autoscaling:SetDesiredCapacity",
                "autoscaling:TerminateInstanceInAutoScalingGroup", "ec2:DescribeImages",
                "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
                "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup",
            ],
            "Resource": "*",
        }],
    });
    b.managed(
        IAM,
        "Policy",
        "autoscaler-policy",
        json!({ "policy": autoscaling.to_string() }),
    );
    b.managed(
        IAM,
        "Role",
        "autoscaler-role",
        json!({ "assumeRolePolicy": trust("pods.eks.amazonaws.com") }),
    );
    b.managed(IAM, "RolePolicyAttachment", "autoscaler-role-policy", json!({
        "policyArnRef": b.reference("autoscaler-policy"), "roleRef": b.reference("autoscaler-role"),
    }));
    pod_identity(
        b,
        region,
        "autoscaler-role",
        "kube-system",
        "cluster-autoscaler",
    );
    role(
        b,
        "efs-csi-role",
        "pods.eks.amazonaws.com",
        &["arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy"],
    );
    pod_identity(
        b,
        region,
        "efs-csi-role",
        "kube-system",
        "efs-csi-controller-sa",
    );
}

fn needs_launch_template(pool: &EksNodePool) -> bool {
    pool.capacity_block.is_some() || pool.fabric.as_deref() == Some("EFA")
}

fn launch_template(b: &mut Builder<'_>, region: &str, pool: &EksNodePool) {
    let mut lt = json!({
        "region": region,
        "name": b.name(&format!("lt-{}", pool.name)),
        "blockDeviceMappings": [{ "deviceName": "/dev/xvda", "ebs": { "volumeSize": pool.disk_size_gb.unwrap_or(100), "volumeType": "gp3" } }],
    });
    if let Some(block) = &pool.capacity_block {
        lt["instanceMarketOptions"] = json!({ "marketType": "capacity-block" });
        lt["capacityReservationSpecification"] = json!({ "capacityReservationTarget": { "capacityReservationId": block.capacity_reservation_id } });
    }
    if pool.fabric.as_deref() == Some("EFA") {
        lt["networkInterfaces"] = json!([{
            "deviceIndex": 0, "networkCardIndex": 0, "interfaceType": "efa",
            "securityGroupRefs": [b.reference("efa-sg")],
        }]);
    }
    b.managed(EC2, "LaunchTemplate", &format!("lt-{}", pool.name), lt);
}

fn node_group(b: &mut Builder<'_>, region: &str, pool: &EksNodePool, subnets: Vec<Value>) {
    let gpu = pool.gpu.as_ref();
    let desired = pool.size.node_count.unwrap_or(1);
    let mut node_labels = json!({ labels::POOL: pool.name });
    let mut group = json!({
        "region": region,
        "clusterNameRef": b.reference("cluster"),
        "nodeRoleArnRef": b.reference("node-role"),
        "subnetIdRefs": subnets,
        "instanceTypes": [pool.instance_type],
        "scalingConfig": {
            "desiredSize": desired,
            "minSize": pool.size.min_node_count.unwrap_or(0).min(desired),
            "maxSize": pool.size.max_node_count.unwrap_or(8).max(desired),
        },
    });
    if let Some(gpu) = gpu {
        node_labels[labels::GPU] = json!(gpu.accelerator_type);
        group["amiType"] = json!(GPU_AMI_TYPE);
        group["taint"] =
            json!([{ "key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE" }]);
    }
    group["labels"] = node_labels;
    if needs_launch_template(pool) {
        launch_template(b, region, pool);
        group["launchTemplate"] =
            json!({ "name": b.name(&format!("lt-{}", pool.name)), "version": "$Latest" });
        if pool.capacity_block.is_some() {
            group["capacityType"] = json!("CAPACITY_BLOCK");
        }
    } else {
        group["diskSize"] = json!(pool.disk_size_gb.unwrap_or(100));
    }
    b.managed(EKS, "NodeGroup", &format!("pool-{}", pool.name), group);
}

fn storage(b: &mut Builder<'_>, region: &str, vpc_cidr: &str, zones: &[String]) {
    b.managed(
        EFS,
        "FileSystem",
        "efs",
        json!({ "region": region, "encrypted": true, "throughputMode": "elastic" }),
    );
    b.managed(EC2, "SecurityGroup", "efs-sg", json!({
        "region": region, "vpcIdRef": b.reference("vpc"), "name": b.name("efs-sg"), "description": "NFS from the cluster's VPC to EFS",
    }));
    b.managed(
        EC2,
        "SecurityGroupIngressRule",
        "efs-nfs",
        json!({
            "region": region, "securityGroupIdRef": b.reference("efs-sg"), "cidrIpv4": vpc_cidr,
            "ipProtocol": "tcp", "fromPort": 2049, "toPort": 2049,
        }),
    );
    for zone in zones {
        b.managed(EFS, "MountTarget", &format!("efs-{zone}"), json!({
            "region": region, "fileSystemIdRef": b.reference("efs"), "subnetIdRef": b.reference(&format!("private-{zone}")),
            "securityGroupRefs": [b.reference("efs-sg")],
        }));
    }
}

/// Composes an EKSCluster.
pub fn compose_eks_cluster(inputs: EksInputs<'_>) -> Composition {
    let xr = inputs.cluster;
    let name = xr.metadata.name.as_deref().unwrap_or_default();
    let namespace = xr
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(labels::SYSTEM_NAMESPACE);
    let spec = &xr.spec;
    let region = spec.region.as_str();
    let networking = spec.networking.clone().unwrap_or_default();
    let vpc_cidr = networking
        .vpc_cidr
        .unwrap_or_else(|| DEFAULT_VPC_CIDR.into());
    let cidrs: Vec<String> = networking
        .subnet_cidrs
        .unwrap_or_else(|| DEFAULT_SUBNET_CIDRS.map(String::from).to_vec());
    let zones = zones(xr, cidrs.len());
    let mut b = Builder::new(name, namespace, spec.credentials.as_ref());

    network(&mut b, region, &vpc_cidr, &cidrs, &zones);
    iam(&mut b, region);
    b.managed(EKS, "Cluster", "cluster", json!({
        "region": region,
        "roleArnRef": b.reference("cluster-role"),
        "vpcConfig": {
            "subnetIdRefs": zones.iter().map(|z| b.reference(&format!("private-{z}"))).collect::<Vec<_>>(),
            "endpointPublicAccess": true,
            "endpointPrivateAccess": true,
        },
        "accessConfig": { "authenticationMode": "API_AND_CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": true },
    }));
    let kubeconfig = b.name("kubeconfig");
    b.managed(
        EKS,
        "ClusterAuth",
        "auth",
        json!({ "region": region, "clusterNameRef": b.reference("cluster") }),
    );
    b.with_connection_secret(&kubeconfig);
    for addon in ADDONS {
        b.managed(
            EKS,
            "Addon",
            &format!("addon-{addon}"),
            json!({
                "region": region, "clusterNameRef": b.reference("cluster"), "addonName": addon,
            }),
        );
    }

    let efa = spec
        .node_pools
        .iter()
        .any(|p| p.fabric.as_deref() == Some("EFA"));
    if efa {
        b.managed(EC2, "SecurityGroup", "efa-sg", json!({
            "region": region, "vpcIdRef": b.reference("vpc"), "name": b.name("efa-sg"), "description": "EFA: all traffic within the group",
        }));
        for (kind, part) in [
            ("SecurityGroupIngressRule", "efa-ingress"),
            ("SecurityGroupEgressRule", "efa-egress"),
        ] {
            b.managed(
                EC2,
                kind,
                part,
                json!({
                    "region": region, "securityGroupIdRef": b.reference("efa-sg"),
                    "referencedSecurityGroupIdRef": b.reference("efa-sg"), "ipProtocol": "-1",
                }),
            );
        }
    }
    let system = EksNodePool {
        name: "system".into(),
        role: modelplane_api::types::PoolRole::System,
        instance_type: SYSTEM_INSTANCE_TYPE.into(),
        disk_size_gb: None,
        size: modelplane_api::types::PoolSize {
            node_count: Some(1),
            min_node_count: Some(1),
            max_node_count: Some(2),
        },
        gpu: None,
        capacity_block: None,
        zones: None,
        fabric: None,
    };
    let all_private: Vec<Value> = zones
        .iter()
        .map(|z| b.reference(&format!("private-{z}")))
        .collect();
    node_group(&mut b, region, &system, all_private.clone());
    for pool in spec.node_pools.iter().filter(|p| p.name != "system") {
        let subnets = match &pool.zones {
            Some(z) if !z.is_empty() => z
                .iter()
                .filter(|z| zones.contains(z))
                .map(|z| b.reference(&format!("private-{z}")))
                .collect(),
            _ => all_private.clone(),
        };
        node_group(&mut b, region, pool, subnets);
    }
    storage(&mut b, region, &vpc_cidr, &zones);

    let mut out = Composition::default();
    if inputs.control_plane_ready {
        b.helm_provider_config(&kubeconfig);
        b.release(
            "cluster-autoscaler",
            "cluster-autoscaler",
            "https://kubernetes.github.io/autoscaler",
            "9.57.0",
            "kube-system",
            json!({
                "autoDiscovery": { "clusterName": b.name("cluster") },
                "awsRegion": region,
                "rbac": { "serviceAccount": { "name": "cluster-autoscaler" } },
            }),
        );
        if efa {
            b.release(
                "aws-dranet",
                "aws-dranet",
                "https://aws.github.io/eks-charts",
                "1.0.0",
                "kube-system",
                json!({}),
            );
        }
        let mut status = json!({ "secrets": [{ "type": "Kubeconfig", "name": kubeconfig, "key": "kubeconfig" }] });
        if let Some(id) = inputs.file_system_id {
            b.on_cluster(json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": { "name": STORAGE_CLASS },
                "provisioner": "efs.csi.aws.com",
                "parameters": { "provisioningMode": "efs-ap", "fileSystemId": id, "directoryPerms": "700" },
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
            }), ReadinessRule::Created);
            status["cache"] = json!({ "storageClassName": STORAGE_CLASS });
        }
        out.status = Some(status);
    }
    out.desired = b.out;
    out
}
