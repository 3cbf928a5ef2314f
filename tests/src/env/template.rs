//! The DynamoDB table schema as declared once in `template.yaml` (resource `StackTable`).
//! Pure: parsing only; [`super::dynamodb`] turns it into a CreateTable call.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::EnvError;

/// The SAM resource holding the schema.
pub const STACK_TABLE_RESOURCE: &str = "StackTable";

/// `template.yaml` of this checkout.
pub fn template_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml")
}

/// The parts of `AWS::DynamoDB::Table` properties that shape a table's behaviour. Others
/// (SSE, point-in-time recovery, tags) do not exist locally and are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TableDefinition {
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub key_schema: Vec<KeyElement>,
    #[serde(default)]
    pub global_secondary_indexes: Vec<SecondaryIndex>,
    #[serde(default)]
    pub local_secondary_indexes: Vec<SecondaryIndex>,
    #[serde(default)]
    pub billing_mode: Option<String>,
    #[serde(default)]
    pub provisioned_throughput: Option<Throughput>,
    #[serde(default)]
    pub time_to_live_specification: Option<TimeToLive>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeDefinition {
    pub attribute_name: String,
    pub attribute_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyElement {
    pub attribute_name: String,
    pub key_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SecondaryIndex {
    pub index_name: String,
    pub key_schema: Vec<KeyElement>,
    pub projection: Projection,
    #[serde(default)]
    pub provisioned_throughput: Option<Throughput>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Projection {
    #[serde(default)]
    pub projection_type: Option<String>,
    #[serde(default)]
    pub non_key_attributes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Throughput {
    pub read_capacity_units: i64,
    pub write_capacity_units: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TimeToLive {
    pub attribute_name: String,
    pub enabled: bool,
}

impl TableDefinition {
    /// Reads `resource` from the template file at `path`.
    pub fn from_template_file(path: &Path, resource: &str) -> Result<Self, EnvError> {
        let text = std::fs::read_to_string(path).map_err(|source| EnvError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_template(&text, resource).map_err(|reason| EnvError::Template {
            path: path.to_owned(),
            reason,
        })
    }

    /// The `StackTable` of this checkout's `template.yaml`.
    pub fn stack_table() -> Result<Self, EnvError> {
        Self::from_template_file(&template_path(), STACK_TABLE_RESOURCE)
    }

    /// Parses `Resources.<resource>.Properties` of a CloudFormation/SAM template.
    ///
    /// The document is read as a generic YAML value first: short intrinsic-function tags
    /// (`!Ref`, `!Sub`, `!GetAtt`) are then plain tagged values wherever they appear, and only
    /// the properties we read must be literal.
    pub fn from_template(yaml: &str, resource: &str) -> Result<Self, String> {
        let document: serde_yaml::Value = serde_yaml::from_str(yaml).map_err(|e| format!("not YAML: {e}"))?;
        let resource_value = document
            .get("Resources")
            .and_then(|resources| resources.get(resource))
            .ok_or_else(|| format!("no resource Resources.{resource}"))?;
        let kind = resource_value.get("Type").and_then(serde_yaml::Value::as_str);
        if kind != Some("AWS::DynamoDB::Table") {
            return Err(format!("Resources.{resource} is {kind:?}, not AWS::DynamoDB::Table"));
        }
        let properties = resource_value
            .get("Properties")
            .cloned()
            .ok_or_else(|| format!("Resources.{resource} has no Properties"))?;
        let table: Self =
            serde_yaml::from_value(properties).map_err(|e| format!("Resources.{resource}.Properties: {e}"))?;
        table
            .check()
            .map_err(|e| format!("Resources.{resource}.Properties: {e}"))?;
        Ok(table)
    }

    /// The time-to-live attribute, when TTL is enabled.
    pub fn ttl_attribute(&self) -> Option<&str> {
        self.time_to_live_specification
            .as_ref()
            .filter(|ttl| ttl.enabled)
            .map(|ttl| ttl.attribute_name.as_str())
    }

    pub fn is_pay_per_request(&self) -> bool {
        self.billing_mode.as_deref() == Some("PAY_PER_REQUEST")
    }

    /// Mistakes CloudFormation itself would reject, caught before any call.
    fn check(&self) -> Result<(), String> {
        let declared = |name: &str| self.attribute_definitions.iter().any(|a| a.attribute_name == name);
        let all_keys = self
            .key_schema
            .iter()
            .chain(self.global_secondary_indexes.iter().flat_map(|i| &i.key_schema))
            .chain(self.local_secondary_indexes.iter().flat_map(|i| &i.key_schema));
        for key in all_keys {
            if !declared(&key.attribute_name) {
                return Err(format!(
                    "key attribute {} is not in AttributeDefinitions",
                    key.attribute_name
                ));
            }
        }
        if !self.key_schema.iter().any(|k| k.key_type == "HASH") {
            return Err("KeySchema has no HASH key".to_owned());
        }
        if !self.is_pay_per_request() && self.provisioned_throughput.is_none() {
            return Err("BillingMode is not PAY_PER_REQUEST and ProvisionedThroughput is missing".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Environment:
      Variables:
        DDB_STACK_TABLE: !Ref StackTable
        NAME: !Sub "${AWS::StackName}-api"
Resources:
  StackTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${AWS::StackName}-stacks"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - { AttributeName: pk, AttributeType: S }
        - { AttributeName: sk, AttributeType: S }
        - { AttributeName: gsi1pk, AttributeType: S }
      KeySchema:
        - { AttributeName: pk, KeyType: HASH }
        - { AttributeName: sk, KeyType: RANGE }
      GlobalSecondaryIndexes:
        - IndexName: by-status
          KeySchema:
            - { AttributeName: gsi1pk, KeyType: HASH }
          Projection:
            ProjectionType: KEYS_ONLY
      TimeToLiveSpecification:
        AttributeName: expires_at
        Enabled: true
      SSESpecification:
        SSEEnabled: true
  Api:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt ApiRole.Arn
      Policies:
        - DynamoDBCrudPolicy: { TableName: !Ref StackTable }
Outputs:
  Table:
    Value: !Ref StackTable
"#;

    #[test]
    fn reads_keys_indexes_and_ttl_despite_intrinsic_tags() {
        let table = TableDefinition::from_template(TEMPLATE, "StackTable").expect("valid template");
        let keys: Vec<_> = table
            .key_schema
            .iter()
            .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
            .collect();
        assert_eq!(keys, [("pk", "HASH"), ("sk", "RANGE")]);
        assert_eq!(table.attribute_definitions.len(), 3);
        assert_eq!(table.global_secondary_indexes[0].index_name, "by-status");
        assert_eq!(
            table.global_secondary_indexes[0].projection.projection_type.as_deref(),
            Some("KEYS_ONLY")
        );
        assert_eq!(table.ttl_attribute(), Some("expires_at"));
        assert!(table.is_pay_per_request());
    }

    #[test]
    fn a_resource_of_another_type_is_refused() {
        let error = TableDefinition::from_template(TEMPLATE, "Api").expect_err("a function is not a table");
        assert!(error.contains("not AWS::DynamoDB::Table"), "{error}");
    }

    #[test]
    fn a_key_without_attribute_definition_is_refused() {
        let broken = TEMPLATE.replace("- { AttributeName: gsi1pk, AttributeType: S }", "");
        let error = TableDefinition::from_template(&broken, "StackTable").expect_err("gsi1pk undeclared");
        assert!(error.contains("gsi1pk"), "{error}");
    }

    #[test]
    fn the_checked_in_template_defines_the_stack_table() {
        let table = TableDefinition::stack_table().expect("template.yaml parses");
        assert!(table.key_schema.iter().any(|k| k.key_type == "HASH"));
    }

    #[test]
    fn the_usage_index_projects_every_field_stats_reads() {
        use stack_core::{Exposure, StackStatus, StackUsage};
        let table = TableDefinition::stack_table().expect("template.yaml parses");
        let usage = table
            .global_secondary_indexes
            .iter()
            .find(|i| i.index_name == "usage")
            .expect("index usage");
        let usage_fields = serde_json::to_value(StackUsage {
            node_id: String::new(),
            status: StackStatus::Running,
            ports: Vec::new(),
            requested_cpu_milli: 0,
            requested_memory_bytes: 0,
            exposure: Exposure::HostPort,
        })
        .expect("usage serializes");
        let projected = &usage.projection.non_key_attributes;
        for field in usage_fields.as_object().expect("an object").keys() {
            assert!(projected.contains(field), "{field} is not projected: {projected:?}");
        }
    }
}
