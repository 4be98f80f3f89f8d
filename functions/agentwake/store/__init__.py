"""DynamoDB and SQS adapters. With ``delivery/``, the only package that imports boto3."""
