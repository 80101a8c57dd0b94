package kafkasource

// RetryableGroupError exposes the consumer-group error classifier to tests.
var RetryableGroupError = retryableGroupError
