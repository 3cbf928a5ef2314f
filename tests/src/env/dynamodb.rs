//! DynamoDB Local: the client, tables created from the template, and throw-away tables.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, LocalSecondaryIndex, Projection,
    ProjectionType, ProvisionedThroughput, ScalarAttributeType, TimeToLiveSpecification,
};

use super::template::{self, TableDefinition};
use super::{EnvError, EnvSettings, unique_name};

const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client for DynamoDB Local with the environment's static dummy credentials; nothing
/// falls back to the default provider chain (which could probe instance metadata).
pub fn dynamodb_client(settings: &EnvSettings) -> Client {
    let credentials = Credentials::new(
        &settings.dynamodb.access_key_id,
        &settings.dynamodb.secret_access_key,
        None,
        None,
        "stack-tests-env",
    );
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(settings.dynamodb.region.clone()))
        .endpoint_url(&settings.dynamodb.endpoint)
        .credentials_provider(credentials)
        .http_client(stack_core::https_client())
        .build();
    Client::from_conf(config)
}

/// Creates table `name` with the schema of `definition`, waits until it is active and
/// enables TTL. Returns `false` when the table already existed (left as it is).
pub async fn create_table(client: &Client, name: &str, definition: &TableDefinition) -> Result<bool, EnvError> {
    let mut request = client
        .create_table()
        .table_name(name)
        .set_attribute_definitions(Some(attribute_definitions(definition)?))
        .set_key_schema(Some(key_schema(&definition.key_schema)?));
    for index in &definition.global_secondary_indexes {
        let mut gsi = GlobalSecondaryIndex::builder()
            .index_name(&index.index_name)
            .set_key_schema(Some(key_schema(&index.key_schema)?))
            .projection(projection(&index.projection));
        if !definition.is_pay_per_request() {
            let throughput = index.provisioned_throughput.or(definition.provisioned_throughput);
            gsi = gsi.set_provisioned_throughput(throughput.map(provisioned).transpose()?);
        }
        request = request.global_secondary_indexes(gsi.build().map_err(EnvError::dynamodb("build GSI"))?);
    }
    for index in &definition.local_secondary_indexes {
        let lsi = LocalSecondaryIndex::builder()
            .index_name(&index.index_name)
            .set_key_schema(Some(key_schema(&index.key_schema)?))
            .projection(projection(&index.projection))
            .build()
            .map_err(EnvError::dynamodb("build LSI"))?;
        request = request.local_secondary_indexes(lsi);
    }
    request = if definition.is_pay_per_request() {
        request.billing_mode(BillingMode::PayPerRequest)
    } else {
        request
            .billing_mode(BillingMode::Provisioned)
            .set_provisioned_throughput(definition.provisioned_throughput.map(provisioned).transpose()?)
    };

    match request.send().await {
        Ok(_) => {}
        Err(error)
            if error
                .as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            return Ok(false);
        }
        Err(error) => return Err(EnvError::dynamodb("CreateTable")(error)),
    }
    client
        .wait_until_table_exists()
        .table_name(name)
        .wait(TABLE_ACTIVE_TIMEOUT)
        .await
        .map_err(EnvError::dynamodb("wait for table"))?;
    if let Some(attribute) = definition.ttl_attribute() {
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name(attribute)
            .enabled(true)
            .build()
            .map_err(EnvError::dynamodb("build TTL"))?;
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(EnvError::dynamodb("UpdateTimeToLive"))?;
    }
    Ok(true)
}

/// A uniquely named table with the template's schema, for one test.
#[derive(Debug, Clone)]
pub struct TestTable {
    name: String,
    client: Client,
}

impl TestTable {
    /// Creates a fresh table named `<prefix>-<random>`.
    pub async fn create(client: &Client, prefix: &str) -> Result<Self, EnvError> {
        Self::create_with(client, prefix, &TableDefinition::stack_table()?).await
    }

    /// Like [`create`](Self::create), with another schema (e.g. the template's without an
    /// index, as a table deployed before that index was added).
    pub async fn create_with(client: &Client, prefix: &str, definition: &TableDefinition) -> Result<Self, EnvError> {
        let name = unique_name(prefix);
        create_table(client, &name, definition).await?;
        Ok(Self {
            name,
            client: client.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the table (call at the end of the test; `down` drops everything anyway).
    pub async fn delete(self) -> Result<(), EnvError> {
        self.client
            .delete_table()
            .table_name(&self.name)
            .send()
            .await
            .map(|_| ())
            .map_err(EnvError::dynamodb("DeleteTable"))
    }
}

fn attribute_definitions(definition: &TableDefinition) -> Result<Vec<AttributeDefinition>, EnvError> {
    definition
        .attribute_definitions
        .iter()
        .map(|a| {
            AttributeDefinition::builder()
                .attribute_name(&a.attribute_name)
                .attribute_type(ScalarAttributeType::from(a.attribute_type.as_str()))
                .build()
                .map_err(EnvError::dynamodb("build attribute definition"))
        })
        .collect()
}

fn key_schema(keys: &[template::KeyElement]) -> Result<Vec<KeySchemaElement>, EnvError> {
    keys.iter()
        .map(|k| {
            KeySchemaElement::builder()
                .attribute_name(&k.attribute_name)
                .key_type(KeyType::from(k.key_type.as_str()))
                .build()
                .map_err(EnvError::dynamodb("build key schema"))
        })
        .collect()
}

fn projection(projection: &template::Projection) -> Projection {
    let kind = projection
        .projection_type
        .as_deref()
        .map(ProjectionType::from)
        .unwrap_or(ProjectionType::All);
    Projection::builder()
        .projection_type(kind)
        .set_non_key_attributes(Some(projection.non_key_attributes.clone()).filter(|a| !a.is_empty()))
        .build()
}

fn provisioned(throughput: template::Throughput) -> Result<ProvisionedThroughput, EnvError> {
    ProvisionedThroughput::builder()
        .read_capacity_units(throughput.read_capacity_units)
        .write_capacity_units(throughput.write_capacity_units)
        .build()
        .map_err(EnvError::dynamodb("build throughput"))
}
