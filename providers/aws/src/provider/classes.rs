//! Node classes resolved against the account: AMIs, subnets and security groups found by
//! their selectors.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::Family;
use crate::config::{DISCOVERY_TAG, Selector};
use crate::error::AwsError;

use super::{AwsProvider, ResolvedClass, filter, tag_filters};

impl AwsProvider {
    /// The node class for a NodePool's class name, resolved (cached for the TTL).
    ///
    /// # Errors
    /// [`AwsError::Config`] when no class of that name nor a default exists, or its
    /// selectors match nothing usable; API errors.
    pub async fn resolve_class(&self, name: &str) -> Result<Arc<ResolvedClass>, AwsError> {
        let (key, class) = self.settings.class(name).ok_or_else(|| {
            AwsError::Config(format!(
                "no AWS node class {name:?} and no {:?} class in the settings",
                crate::config::DEFAULT_CLASS
            ))
        })?;
        let now = self.clock.now_s();
        if let Some((at, r)) = self.classes.lock().await.get(key)
            && now - at < self.ttl()
        {
            return Ok(r.clone());
        }
        let discovery = Selector::tag(DISCOVERY_TAG, self.settings.cluster.clone());
        let subnets_sel = if class.subnets.is_empty() {
            &discovery
        } else {
            &class.subnets
        };
        let sg_sel = if class.security_groups.is_empty() {
            &discovery
        } else {
            &class.security_groups
        };
        let resolved = ResolvedClass {
            name: key.to_string(),
            class: class.clone(),
            amis: if class.ami.is_empty() {
                BTreeMap::new()
            } else {
                self.resolve_amis(&class.ami).await?
            },
            subnets: self.resolve_subnets(subnets_sel).await?,
            security_groups: self.resolve_security_groups(sg_sel).await?,
        };
        if resolved.subnets.is_empty() {
            return Err(AwsError::Config(format!(
                "node class {key:?}: no subnet matches {subnets_sel:?}"
            )));
        }
        let r = Arc::new(resolved);
        self.classes
            .lock()
            .await
            .insert(key.to_string(), (now, r.clone()));
        Ok(r)
    }

    async fn resolve_amis(&self, sel: &Selector) -> Result<BTreeMap<String, String>, AwsError> {
        let mut filters = tag_filters(&sel.tags);
        if let Some(n) = &sel.name {
            filters.push(filter("name", [n.clone()]));
        }
        filters.push(filter("state", ["available"]));
        let out = self
            .api
            .call(Family::Describe, "DescribeImages", || {
                let mut r = self.api.client.describe_images();
                if sel.ids.is_empty() {
                    r = r.set_filters(Some(filters.clone()));
                    if !sel.owners.is_empty() {
                        r = r.set_owners(Some(sel.owners.clone()));
                    }
                } else {
                    r = r.set_image_ids(Some(sel.ids.clone()));
                }
                r.send()
            })
            .await?;
        // Newest per architecture (creation dates are ISO 8601, so they sort as strings).
        let mut best: BTreeMap<String, (String, String)> = BTreeMap::new();
        for img in out.images() {
            let arch = match img.architecture().map(|a| a.as_str()) {
                Some("x86_64") => "amd64",
                Some("arm64") => "arm64",
                _ => continue,
            };
            let (Some(id), created) = (img.image_id(), img.creation_date().unwrap_or("")) else {
                continue;
            };
            let e = best
                .entry(arch.to_string())
                .or_insert((created.to_string(), id.to_string()));
            if (created, id) > (e.0.as_str(), e.1.as_str()) {
                *e = (created.to_string(), id.to_string());
            }
        }
        Ok(best.into_iter().map(|(a, (_, id))| (a, id)).collect())
    }

    async fn resolve_subnets(&self, sel: &Selector) -> Result<BTreeMap<String, String>, AwsError> {
        let filters = tag_filters(&sel.tags);
        let out = self
            .api
            .call(Family::Describe, "DescribeSubnets", || {
                let r = self.api.client.describe_subnets();
                if sel.ids.is_empty() {
                    r.set_filters(Some(filters.clone())).send()
                } else {
                    r.set_subnet_ids(Some(sel.ids.clone())).send()
                }
            })
            .await?;
        // The subnet with the most free addresses per zone; ties by id for determinism.
        let mut best: BTreeMap<String, (i32, String)> = BTreeMap::new();
        for s in out.subnets() {
            let (Some(zone), Some(id)) = (s.availability_zone(), s.subnet_id()) else {
                continue;
            };
            let free = s.available_ip_address_count().unwrap_or(0);
            let e = best
                .entry(zone.to_string())
                .or_insert((free, id.to_string()));
            if free > e.0 || (free == e.0 && id < e.1.as_str()) {
                *e = (free, id.to_string());
            }
        }
        Ok(best.into_iter().map(|(z, (_, id))| (z, id)).collect())
    }

    async fn resolve_security_groups(&self, sel: &Selector) -> Result<Vec<String>, AwsError> {
        let filters = tag_filters(&sel.tags);
        let out = self
            .api
            .call(Family::Describe, "DescribeSecurityGroups", || {
                let r = self.api.client.describe_security_groups();
                if sel.ids.is_empty() {
                    r.set_filters(Some(filters.clone())).send()
                } else {
                    r.set_group_ids(Some(sel.ids.clone())).send()
                }
            })
            .await?;
        let mut ids: Vec<String> = out
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect();
        ids.sort();
        Ok(ids)
    }
}
