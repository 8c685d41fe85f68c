// Package pgerr holds the SQLSTATE codes pgfleet uses and the error type that
// carries one from where an error is made to the wire, where Flatten turns any
// error into the ErrorResponse a client sees. It is a leaf: it imports nothing
// of pgfleet's.
package pgerr

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATE codes, named as in PostgreSQL's errcodes.txt.
const (
	ProtocolViolation        = "08P01"
	ConnectionFailure        = "08006"
	SQLClientUnableToConnect = "08001"
	InvalidAuthorization     = "28000"
	InvalidPassword          = "28P01"
	FeatureNotSupported      = "0A000"
	TooManyConnections       = "53300"
	QueryCanceled            = "57014"
	AdminShutdown            = "57P01"
	CannotConnectNow         = "57P03"
	DuplicatePreparedStmt    = "42P05"
	UndefinedPreparedStmt    = "26000"
	UndefinedCursor          = "34000"
	InvalidParameterValue    = "22023"
	Internal                 = "XX000"
	ConfigurationLimitExceed = "53400"
	InvalidTransactionState  = "25000"
	ActiveSQLTransaction     = "25001"
	InFailedSQLTransaction   = "25P02"
	CharacterNotInRepertoire = "22021"
	ReadOnlySQLTransaction   = "25006"
	IdleInTransactionTimeout = "25P03"
	InvalidSavepointSpec     = "3B001"
	SerializationFailure     = "40001"
	DeadlockDetected         = "40P01"
	InvalidCatalogName       = "3D000"
	ObjectNotInPrerequisite  = "55000"
	ObjectInUse              = "55006"
	DataCorrupted            = "XX001"
	IdleSessionTimeout       = "57P05"
	DuplicateObject          = "42710"
	UndefinedObject          = "42704"
	UndefinedTable           = "42P01"
	LockNotAvailable         = "55P03"

	InvalidTextRepresentation = "22P02"
	NumericValueOutOfRange    = "22003"
	UndefinedColumn           = "42703"
	NotNullViolation          = "23502"
	WrongObjectType           = "42809"
	NameTooLong               = "42622"

	// Kept apart from the list above to ease merges.
	DuplicateCursor   = "42P03"
	BadCopyFileFormat = "22P04"
	DuplicateTable    = "42P07"
	SyntaxError       = "42601"
	OutOfMemory       = "53200"

	DependentObjectsStillExist = "2BP01"
	InsufficientPrivilege      = "42501"
	UniqueViolation            = "23505"
	InvalidSchemaName          = "3F000"
	UndefinedFunction          = "42883"
	ReservedName               = "42939"
)

// Error is a client-visible error: a SQLSTATE, a message and, where it helps,
// a hint that says what to do.
type Error struct {
	Severity string // ERROR unless set (FATAL ends the session)
	Code     string
	Message  string
	Detail   string
	Hint     string
	// What a worker's error names (FromWorker keeps them): the client
	// sees them as PostgreSQL sends them, shard names mapped back.
	Schema, Table, Column, DataType, Constraint string
	// Routine is the function of PostgreSQL's that raises the error, for
	// errors pgfleet gives in PostgreSQL's place (clients key on some:
	// postgres.js prepares again after RevalidateCachedQuery's).
	Routine string
}

// FromWorker copies a worker's error: its SQLSTATE, message, detail, hint
// and the objects it names.
func FromWorker(pe *pgconn.PgError) *Error {
	return &Error{Severity: "ERROR", Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint,
		Schema: pe.SchemaName, Table: pe.TableName, Column: pe.ColumnName, DataType: pe.DataTypeName,
		Constraint: pe.ConstraintName, Routine: pe.Routine}
}

func (e *Error) Error() string { return e.Message + " (SQLSTATE " + e.Code + ")" }

// SQLState reports the error's code, as pgconn.PgError does.
func (e *Error) SQLState() string { return e.Code }

// New makes an ERROR with a code and a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Severity: "ERROR", Code: code, Message: fmt.Sprintf(format, args...)}
}

// Fatal makes a FATAL error: the session ends after it is sent.
func Fatal(code, format string, args ...any) *Error {
	return &Error{Severity: "FATAL", Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithHint returns e with a hint attached.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.Hint = fmt.Sprintf(format, args...)
	return e
}

// connErrorCode classifies an error of a connection to a worker by what it
// is, not its text: a failed connection attempt is 08001, a connection that
// broke (end of stream, reset, a network timeout) 08006; anything else "".
func connErrorCode(err error) string {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return SQLClientUnableToConnect
	}
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne) {
		return ConnectionFailure
	}
	return ""
}

// Flatten turns any error into the ErrorResponse a client sees. Errors from a
// worker keep their code, detail, hint and position; errors pgfleet did not
// classify become XX000 with the original text as detail, except failed
// worker connections (08001, 08006).
func Flatten(err error) *pgproto3.ErrorResponse {
	var pe *Error
	if errors.As(err, &pe) {
		sev := pe.Severity
		if sev == "" {
			sev = "ERROR"
		}
		return &pgproto3.ErrorResponse{Severity: sev, SeverityUnlocalized: sev, Code: pe.Code,
			Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint, SchemaName: pe.Schema,
			TableName: pe.Table, ColumnName: pe.Column, DataTypeName: pe.DataType, ConstraintName: pe.Constraint,
			Routine: pe.Routine}
	}
	var wpe *pgconn.PgError
	if errors.As(err, &wpe) {
		return &pgproto3.ErrorResponse{Severity: wpe.Severity, SeverityUnlocalized: wpe.Severity,
			Code: wpe.Code, Message: wpe.Message, Detail: wpe.Detail, Hint: wpe.Hint,
			Position: wpe.Position, Where: wpe.Where, SchemaName: wpe.SchemaName,
			TableName: wpe.TableName, ColumnName: wpe.ColumnName, DataTypeName: wpe.DataTypeName,
			ConstraintName: wpe.ConstraintName, File: wpe.File, Line: wpe.Line, Routine: wpe.Routine}
	}
	if code := connErrorCode(err); code != "" {
		// A worker connection failed (lost, refused, timed out): that is
		// what the client is told, not an internal error.
		return &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code,
			Message: "lost connection to a worker: " + err.Error(),
			Hint:    "The statement's outcome is unknown; check before retrying it."}
	}
	return &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: Internal,
		Message: "internal error in pgfleet", Detail: err.Error(),
		Hint: "This is a bug in pgfleet; please report it with the statement that caused it."}
}
