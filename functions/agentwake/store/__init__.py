"""DynamoDB, SQS and Scheduler adapters, and the one botocore session every runtime client comes from (``aws``)."""
