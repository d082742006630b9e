//! Launch templates: one per node class and boot configuration, named by a hash of its
//! content, created when missing.

use aws_sdk_ec2::types::{
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateTagSpecificationRequest,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};
use providers::tags;

use crate::api::Family;
use crate::error::AwsError;
use crate::launch::{self};

use super::{AwsProvider, ResolvedClass, filter};

impl AwsProvider {
    /// The launch template for a class and boot configuration, created when missing.
    pub(super) async fn ensure_template(
        &self,
        class: &ResolvedClass,
        user_data: &str,
        default_ami: &str,
    ) -> Result<String, AwsError> {
        let c = &class.class;
        let root = c.root_volume_gib.to_string();
        let sgs = class.security_groups.join(",");
        let tags_text = format!("{:?}", c.tags);
        let name = launch::template_name(
            &self.settings.cluster,
            &class.name,
            &[
                user_data,
                default_ami,
                &sgs,
                c.instance_profile.as_deref().unwrap_or(""),
                &root,
                &c.root_device_name,
                &tags_text,
            ],
        );
        if let Some(id) = self.templates.lock().await.get(&name) {
            return Ok(id.clone());
        }
        let existing = self.find_template(&name).await?;
        let id = match existing {
            Some(id) => id,
            None => match self
                .create_template(&name, class, user_data, default_ami)
                .await
            {
                Ok(id) => id,
                // Another replica (or an earlier attempt whose answer was lost) made it.
                Err(AwsError::Api { code, .. })
                    if code.starts_with("InvalidLaunchTemplateName.AlreadyExists") =>
                {
                    self.find_template(&name)
                        .await?
                        .ok_or_else(|| AwsError::Api {
                            operation: "DescribeLaunchTemplates",
                            code: "NotFound".into(),
                            message: format!("launch template {name} exists but cannot be found"),
                            transient: true,
                        })?
                }
                Err(e) => return Err(e),
            },
        };
        self.templates.lock().await.insert(name, id.clone());
        Ok(id)
    }

    async fn find_template(&self, name: &str) -> Result<Option<String>, AwsError> {
        let out = self
            .api
            .call(Family::Describe, "DescribeLaunchTemplates", || {
                self.api
                    .client
                    .describe_launch_templates()
                    .filters(filter("launch-template-name", [name.to_string()]))
                    .send()
            })
            .await?;
        Ok(out
            .launch_templates()
            .iter()
            .find(|t| t.launch_template_name() == Some(name))
            .and_then(|t| t.launch_template_id().map(str::to_string)))
    }

    async fn create_template(
        &self,
        name: &str,
        class: &ResolvedClass,
        user_data: &str,
        default_ami: &str,
    ) -> Result<String, AwsError> {
        let c = &class.class;
        let mut tags = c.tags.clone();
        tags.insert(tags::CLUSTER.into(), self.settings.cluster.clone());
        let tag_list: Vec<aws_sdk_ec2::types::Tag> = tags
            .iter()
            .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
            .collect();
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(default_ami)
            .set_security_group_ids(
                (!class.security_groups.is_empty()).then(|| class.security_groups.clone()),
            )
            .block_device_mappings(
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(&c.root_device_name)
                    .ebs(
                        LaunchTemplateEbsBlockDeviceRequest::builder()
                            .volume_size(i32::try_from(c.root_volume_gib).unwrap_or(i32::MAX))
                            .volume_type(VolumeType::Gp3)
                            .encrypted(true)
                            .delete_on_termination(true)
                            .build(),
                    )
                    .build(),
            )
            // IMDSv2 only, one hop: pods cannot reach the node's role credentials.
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_tokens(LaunchTemplateHttpTokensState::Required)
                    .http_put_response_hop_limit(1)
                    .build(),
            )
            .user_data(aws_smithy_types::base64::encode(user_data))
            .tag_specifications(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::Volume)
                    .set_tags(Some(tag_list.clone()))
                    .build(),
            );
        if let Some(p) = &c.instance_profile {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(p)
                    .build(),
            );
        }
        let data = data.build();
        let token = format!("lt-{:016x}", launch::fnv1a(&[name]));
        let out = self
            .api
            .call(Family::Mutate, "CreateLaunchTemplate", || {
                self.api
                    .client
                    .create_launch_template()
                    .launch_template_name(name)
                    .client_token(&token)
                    .launch_template_data(data.clone())
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::LaunchTemplate)
                            .set_tags(Some(tag_list.clone()))
                            .build(),
                    )
                    .send()
            })
            .await?;
        out.launch_template()
            .and_then(|t| t.launch_template_id())
            .map(str::to_string)
            .ok_or_else(|| AwsError::Api {
                operation: "CreateLaunchTemplate",
                code: "EmptyResponse".into(),
                message: "no launch template id in the answer".into(),
                transient: true,
            })
    }
}
