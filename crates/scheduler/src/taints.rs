//! Cluster taints and deployment tolerations (`behavior.md` §1.10).

use modelplane_api::types::{TaintEffect, TolerationOperator};

use crate::model::{Taint, Toleration};

/// Whether `toleration` tolerates `taint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration.effect.is_none_or(|e| e == taint.effect);
    let key_ok = match toleration.operator {
        TolerationOperator::Exists => toleration.key.is_empty() || toleration.key == taint.key,
        TolerationOperator::Equal => toleration.key == taint.key && toleration.value == taint.value,
    };
    effect_ok && key_ok
}

/// The taints no toleration covers.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Vec<&'a Taint> {
    taints
        .iter()
        .filter(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        .collect()
}

/// New replicas stay off a cluster with an untolerated NoSchedule or NoExecute taint.
pub fn blocks_new(taints: &[Taint], tolerations: &[Toleration]) -> bool {
    !untolerated(taints, tolerations).is_empty()
}

/// Existing replicas are evicted by an untolerated NoExecute taint.
pub fn evicts(taints: &[Taint], tolerations: &[Toleration]) -> bool {
    untolerated(taints, tolerations)
        .iter()
        .any(|t| t.effect == TaintEffect::NoExecute)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    fn toleration(
        key: &str,
        operator: TolerationOperator,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator,
            value: value.into(),
            effect,
        }
    }

    use TaintEffect::{NoExecute, NoSchedule};
    use TolerationOperator::{Equal, Exists};

    #[test]
    fn exists_with_empty_key_tolerates_every_taint() {
        let all = toleration("", Exists, "", None);
        assert!(tolerates(&all, &taint("a", "x", NoSchedule)));
        assert!(tolerates(&all, &taint("b", "", NoExecute)));
    }

    #[test]
    fn exists_with_a_key_tolerates_any_value_of_that_key() {
        let t = toleration("maintenance", Exists, "", None);
        assert!(tolerates(&t, &taint("maintenance", "anything", NoSchedule)));
        assert!(!tolerates(&t, &taint("other", "", NoSchedule)));
    }

    #[test]
    fn equal_needs_the_same_key_and_value() {
        let t = toleration("tier", Equal, "gold", None);
        assert!(tolerates(&t, &taint("tier", "gold", NoExecute)));
        assert!(!tolerates(&t, &taint("tier", "silver", NoExecute)));
        // An unset value equals an empty one.
        assert!(tolerates(
            &toleration("k", Equal, "", None),
            &taint("k", "", NoSchedule)
        ));
    }

    #[test]
    fn an_effect_restricts_what_is_tolerated() {
        let t = toleration("k", Exists, "", Some(NoSchedule));
        assert!(tolerates(&t, &taint("k", "", NoSchedule)));
        // A NoSchedule-only toleration does not cover NoExecute with the same key.
        assert!(!tolerates(&t, &taint("k", "", NoExecute)));
    }

    #[test]
    fn no_schedule_blocks_new_replicas_but_does_not_evict() {
        let taints = [taint("k", "", NoSchedule)];
        assert!(blocks_new(&taints, &[]));
        assert!(!evicts(&taints, &[]));
    }

    #[test]
    fn no_execute_blocks_and_evicts_unless_tolerated() {
        let taints = [taint("k", "", NoExecute)];
        assert!(blocks_new(&taints, &[]) && evicts(&taints, &[]));
        let tol = [toleration("k", Exists, "", None)];
        assert!(!blocks_new(&taints, &tol) && !evicts(&taints, &tol));
    }

    #[test]
    fn every_untolerated_taint_counts() {
        let taints = [taint("a", "", NoSchedule), taint("b", "", NoExecute)];
        let tol = [toleration("a", Exists, "", None)];
        assert!(blocks_new(&taints, &tol));
        assert!(evicts(&taints, &tol));
    }
}
